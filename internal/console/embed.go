package console

import (
	"embed"
	"io/fs"
)

// dist holds the built front-end (web/console → vite build). Only its
// .gitignore is checked in, so a fresh checkout builds and serves a page that
// says how to build the console.
//
//go:embed all:dist
var dist embed.FS

// assets returns the built files rooted at dist/.
func assets() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil { // cannot happen: "dist" is a valid path
		panic(err)
	}
	return sub
}
