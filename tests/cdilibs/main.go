// cdi-list reports what one release of the CDI library (container-device-interface) makes
// of a node's spec directories, as a container runtime linking it does: the registry it
// builds (cdi.NewCache with those directories, no auto-refresh) lists the devices it can
// resolve, and the files it refused, with the library's own reasons. build.sh builds this
// same file once per library release that a containerd release links (the import path
// below is rewritten for the releases published before the library moved to tags.cncf.io).
//
// Usage: cdi-list DIR [DIR...]; prints {"devices": ["vendor/class=name", ...],
// "errors": {"path": ["reason", ...]}}.
package main

import (
	"encoding/json"
	"os"
	"sort"

	"tags.cncf.io/container-device-interface/pkg/cdi"
)

func main() {
	cache, _ := cdi.NewCache(cdi.WithSpecDirs(os.Args[1:]...), cdi.WithAutoRefresh(false))
	out := map[string]interface{}{"devices": []string{}, "errors": map[string][]string{}}
	if cache != nil {
		devices := cache.ListDevices()
		sort.Strings(devices)
		out["devices"] = devices
		errs := map[string][]string{}
		for path, list := range cache.GetErrors() {
			for _, err := range list {
				errs[path] = append(errs[path], err.Error())
			}
		}
		out["errors"] = errs
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
}
