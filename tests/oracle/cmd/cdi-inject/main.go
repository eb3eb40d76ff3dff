// cdi-inject resolves CDI device names against spec directories with the real CDI library,
// exactly as containerd does for a device plugin's CDI names (cdi-annotations, cdi-cri),
// and prints one JSON line: {"ok": bool, "error": "...", "env": [...], "devices": [...]}.
// --env seeds the container's environment as the kubelet passes it, so the spec's own env
// edits apply over it as they do in containerd.
//
//	cdi-inject --spec-dir /etc/cdi --spec-dir /var/run/cdi [--env K=V]... vendor/class=name...
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"gpupool.test/oracle/internal/cdiinject"
)

type result struct {
	OK      bool     `json:"ok"`
	Error   string   `json:"error,omitempty"`
	Env     []string `json:"env,omitempty"`
	Devices []string `json:"devices,omitempty"`
}

func main() {
	var specDirs, env cdiinject.Strings
	flag.Var(&specDirs, "spec-dir", "a CDI spec directory, in priority order (repeatable)")
	flag.Var(&env, "env", "the container's own environment, NAME=VALUE (repeatable)")
	flag.Parse()
	out := result{}
	cache, err := cdiinject.Cache(specDirs)
	if err != nil {
		out.Error = err.Error()
		emit(out)
		return
	}
	spec := &oci.Spec{Process: &oci.Process{Env: append([]string{}, env...)}, Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(spec, flag.Args()...); err != nil {
		out.Error = err.Error()
	} else {
		out.OK = true
		out.Env = spec.Process.Env
		out.Devices = cdiinject.Devices(spec)
	}
	emit(out)
}

func emit(r result) {
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
