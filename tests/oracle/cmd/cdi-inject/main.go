// cdi-inject resolves CDI device names against spec directories with the real CDI library,
// exactly as containerd does for a device plugin's CDI names (cdi-annotations, cdi-cri),
// and prints one JSON line: {"ok": bool, "error": "...", "env": [...]}.
//
//	cdi-inject --spec-dir /etc/cdi --spec-dir /var/run/cdi vendor/class=name...
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

type dirs []string

func (d *dirs) String() string     { return strings.Join(*d, ",") }
func (d *dirs) Set(v string) error { *d = append(*d, v); return nil }

type result struct {
	OK      bool     `json:"ok"`
	Error   string   `json:"error,omitempty"`
	Env     []string `json:"env,omitempty"`
	Devices []string `json:"devices,omitempty"`
}

func main() {
	var specDirs dirs
	flag.Var(&specDirs, "spec-dir", "a CDI spec directory, in priority order (repeatable)")
	flag.Parse()
	out := result{}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(specDirs...), cdi.WithAutoRefresh(false))
	if err != nil {
		// Broken spec files are reported here but do not stop resolution of the others,
		// as in containerd; only a cache that cannot exist at all is fatal.
		if cache == nil {
			out.Error = err.Error()
			emit(out)
			return
		}
	}
	spec := &oci.Spec{Process: &oci.Process{Env: []string{}}, Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(spec, flag.Args()...); err != nil {
		out.Error = err.Error()
	} else {
		out.OK = true
		out.Env = spec.Process.Env
		for _, d := range spec.Linux.Devices {
			out.Devices = append(out.Devices, d.Path)
		}
	}
	emit(out)
}

func emit(r result) {
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
