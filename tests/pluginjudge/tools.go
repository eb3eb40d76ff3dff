//go:build tools

// The plugin's own config-manager, built beside plugin-judge (build.sh): the program that
// picks a node's config from the standalone chart's ConfigMap.
package tools

import _ "github.com/NVIDIA/k8s-device-plugin/cmd/config-manager"
