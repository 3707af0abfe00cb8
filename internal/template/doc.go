// Package template is Airlock's content-addressed template store. A template
// is a root filesystem built from a Recipe (Debian packages plus setup
// commands) into <dataDir>/templates/<hash>/rootfs, where hash is the recipe's
// content hash. Templates are only ever used as read-only overlay lower
// directories: nothing writes below <hash>/ after the build renamed it there.
// Records (alias → hash) are kept in the store.
//
// The rest of this comment is how the package works now (moved here from
// docs/ARCHITECTURE.md, which keeps the map).
//
// # Templates
//
// A recipe (`internal/template/recipe.go`) is a Debian suite, a package list and setup lines; its
// hash (canonical JSON + recipe version + compat library hash) names the directory. `mmdebstrap
// --mode=root --variant=minbase` builds into `templates/.tmp-*` inside a private mount namespace,
// then the directory is renamed into place. Concurrent builds of one name are coalesced.
// `airlock serve` ensures `--templates` (default `base,code-interpreter-v1`) before `/health`
// turns 200; the second start finds them on disk and is ready in well under a second.
// With `--artifacts`, every recorded template is also in the artifact store (pushed before its record is
// written) and a node that lacks a recorded template's directory pulls it on first use, hash-checked, into
// `templates/<hash>/` (and `Ensure` pulls a built-in recipe's build rather than building it): see
// "Artifacts", "Templates in the store".
//
// Template reads follow E2B's OpenAPI (`internal/api/templates.go`): `GET /templates` and
// `GET /v2/templates` (Template[], one page: one entry per template name, as on E2B, whatever its
// tags; `templateID`, `aliases` and `names` are the bare name, the build shown is the `default`
// tag's, else the newest tag's, `buildCount` counts the distinct builds its tags point at, and the
// Airlock extension `tags` lists the tags, `default` for the bare name), `GET /templates/{id}`
// (TemplateWithBuilds: the template's SDK builds, see below, or for a template never built through
// that API its one current build, `buildID` in uuid form from the content hash), `GET /templates/{id}/tags` (TemplateTag[]:
// one per tag, see "Two ways in" below) and `GET /templates/aliases/{alias}` (200 `{templateID, public}` for a
// template or named snapshot with that id/alias/name, 404 otherwise: the SDK's `Template.exists`; a
// bare name exists when any of its tags does, `name:tag` only when that tag does, 404 "tag 't' does
// not exist for template 'name'" otherwise, as E2B answers).
// `{id}` may be a template's id, alias or name, or `name:tag` of an existing tag; named snapshots
// are listed as templates.
package template
