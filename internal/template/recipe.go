package template

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
)

// recipeVersion is mixed into every recipe hash. Bump it whenever the build
// procedure (mmdebstrap flags, dpkg filters, fixed setup steps) changes so
// that existing templates are rebuilt.
const recipeVersion = 2

// Recipe describes how a template root filesystem is built: a Debian suite,
// the packages installed on top of the minbase variant, and shell lines run
// inside a chroot after installation.
type Recipe struct {
	Name     string
	Suite    string
	Packages []string
	Setup    []string // shell lines run (with sh -e) in a chroot after install
}

// recipeSpec is the canonical, hashed JSON form of a Recipe.
type recipeSpec struct {
	Version  int      `json:"version"`
	Name     string   `json:"name"`
	Suite    string   `json:"suite"`
	Packages []string `json:"packages"`
	Setup    []string `json:"setup"`
}

func (r *Recipe) spec() recipeSpec {
	pkgs := slices.Clone(r.Packages)
	slices.Sort(pkgs)
	pkgs = slices.Compact(pkgs)
	setup := slices.Clone(r.Setup)
	if setup == nil {
		setup = []string{}
	}
	if pkgs == nil {
		pkgs = []string{}
	}
	return recipeSpec{Version: recipeVersion, Name: r.Name, Suite: r.Suite, Packages: pkgs, Setup: setup}
}

// SpecJSON returns the canonical JSON description of the recipe (packages
// sorted and de-duplicated, the recipe version included). It is what Hash is
// computed over and what is recorded as store.Template.Spec.
func (r *Recipe) SpecJSON() string {
	b, err := json.Marshal(r.spec())
	if err != nil {
		// Only strings and ints: cannot fail.
		panic(fmt.Sprintf("template: marshal recipe spec: %v", err))
	}
	return string(b)
}

// Hash returns the content hash of the recipe: hex SHA-256 over SpecJSON.
func (r *Recipe) Hash() string {
	sum := sha256.Sum256([]byte(r.SpecJSON()))
	return hex.EncodeToString(sum[:])
}

// basePackages is what the `base` template installs (on top of Debian's
// minbase variant). See spec §7 for what the SDK test suites rely on.
var basePackages = []string{
	"bash", "coreutils", "procps", "iproute2", "iputils-ping", "ca-certificates",
	"curl", "git", "sudo", "python3", "python-is-python3", "ncurses-bin",
	"ncurses-base", "less", "findutils", "grep", "sed", "tar", "gzip", "xz-utils",
	"unzip", "netbase", "tzdata", "passwd",
}

// baseSetup prepares the default user and shell environment.
var baseSetup = []string{
	// The sandbox user: uid/gid 1000, passwordless sudo.
	"groupadd --gid 1000 user",
	"useradd --uid 1000 --gid 1000 --groups sudo --create-home --home-dir /home/user --shell /bin/bash user",
	"chown 1000:1000 /home/user",
	"chmod 0755 /home/user",
	"printf 'user ALL=(ALL:ALL) NOPASSWD: ALL\\n' > /etc/sudoers.d/user",
	"chmod 0440 /etc/sudoers.d/user",
	// umask 022 for login shells and PAM sessions; a UTF-8 locale without locales-all.
	"sed -i 's/^UMASK.*/UMASK\\t\\t022/' /etc/login.defs",
	"printf 'umask 022\\nexport LANG=\"${LANG:-C.UTF-8}\"\\n' > /etc/profile.d/00-airlock.sh",
	"printf 'LANG=C.UTF-8\\n' > /etc/default/locale",
	// A login shell (`bash -l -c`, how the SDKs run every command) pays for
	// each process it starts: under gVisor a fork+exec costs 10-20 ms.
	// /etc/profile runs `id -u` twice and root's ~/.profile runs `mesg n`;
	// bash knows its EUID and mesg only matters on a terminal. Other
	// Bourne shells (no EUID) still ask id.
	"sed -i 's/\"$(id -u)\"/\"${EUID:-$(id -u)}\"/g' /etc/profile",
	"grep -q 'EUID:-' /etc/profile",
	"sed -i 's#^mesg n 2> /dev/null || true$#[ -t 0 ] \\&\\& mesg n 2> /dev/null || true#' /root/.profile",
	// Placeholders; the runtime provides the real hostname and resolver.
	"printf 'sandbox\\n' > /etc/hostname",
	"printf '127.0.0.1\\tlocalhost sandbox\\n::1\\t\\tlocalhost ip6-localhost ip6-loopback\\n' > /etc/hosts",
	": > /etc/resolv.conf",
	// The agent binary is bind-mounted here at run time.
	"mkdir -p /usr/local/bin",
	"test -d /root",
}

// codeInterpreterPackages is added to basePackages for `code-interpreter-v1`.
var codeInterpreterPackages = []string{
	"python3-ipykernel", "python3-jupyter-client", "python3-matplotlib",
	"python3-matplotlib-inline", "python3-numpy", "python3-pandas", "python3-scipy",
	"python3-sklearn", "python3-seaborn", "python3-sympy", "python3-openpyxl",
	"python3-requests", "python3-bs4", "python3-pil", "python3-plotly", "python3-xlrd",
	"python3-tabulate", "python3-statsmodels", "python3-networkx", "python3-docx",
	"python3-aiohttp", "python3-tz", "python3-imageio", "python3-joblib", "python3-pytest",
	"nodejs", "node-acorn", "node-typescript",
	// R contexts: IRkernel speaks the Jupyter protocol (the agent drives it
	// like ipykernel); Java contexts: a JShell runner on the JDK. See
	// docs/DECISIONS.md (issue 26) for their cost.
	"r-cran-irkernel", "openjdk-17-jdk-headless",
}

// recipes are the templates Airlock knows how to build.
var recipes = map[string]*Recipe{
	"base": {
		Name:     "base",
		Suite:    "bookworm",
		Packages: basePackages,
		Setup:    baseSetup,
	},
	"code-interpreter-v1": {
		Name:     "code-interpreter-v1",
		Suite:    "bookworm",
		Packages: append(slices.Clone(basePackages), codeInterpreterPackages...),
		Setup:    baseSetup,
	},
}

// LookupRecipe returns the built-in recipe called name, or ErrUnknownRecipe.
func LookupRecipe(name string) (*Recipe, error) {
	r, ok := recipes[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownRecipe, name)
	}
	return r, nil
}

// RecipeNames returns the names of the built-in recipes, sorted.
func RecipeNames() []string {
	names := make([]string, 0, len(recipes))
	for n := range recipes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
