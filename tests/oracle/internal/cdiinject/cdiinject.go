// Package cdiinject is what the oracle's programs share: a repeatable string flag, and CDI
// device injection into an OCI spec with the real CDI library, as containerd runs it.
package cdiinject

import (
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// Strings is a flag that may be given more than once.
type Strings []string

func (s *Strings) String() string     { return strings.Join(*s, ",") }
func (s *Strings) Set(v string) error { *s = append(*s, v); return nil }

// Cache reads the spec directories, in priority order, as containerd's CDI cache does:
// broken spec files are reported but do not stop resolution of the others; only a cache
// that cannot exist at all is an error.
func Cache(specDirs []string) (*cdi.Cache, error) {
	cache, err := cdi.NewCache(cdi.WithSpecDirs(specDirs...), cdi.WithAutoRefresh(false))
	if cache == nil {
		return nil, err
	}
	return cache, nil
}

// Devices lists the device nodes an injection put in the spec.
func Devices(spec *oci.Spec) []string {
	out := []string{}
	for _, d := range spec.Linux.Devices {
		out = append(out, d.Path)
	}
	return out
}
