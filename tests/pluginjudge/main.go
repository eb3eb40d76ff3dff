// plugin-judge: the device-list strategy NVIDIA's device plugin settles on, decided by the
// plugin's own configuration code (github.com/NVIDIA/k8s-device-plugin v0.19.3,
// api/config/v1: NewConfig, parseConfig, Flags.UpdateFromCLIFlags, NewDeviceListStrategies)
// and the CLI library it parses its flags and environment with (urfave/cli v2).
//
// HAMi's device plugin loads its configuration through the same NewConfig
// (HAMi v2.10 cmd/device-plugin/nvidia/main.go, loadConfig).
//
// Each line of standard input is one case, {"args": [...], "env": {...}, "config": "..."}:
// the plugin container's arguments after its command, its environment, and the text of the
// file its config-file flag names (absent: no such file). Each line out is
// {"strategies": [...], "migStrategy": "..."} or {"error": "..."}: what the plugin would stop
// on at start-up.
//
// Test infrastructure only; the product imports none of it.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	spec "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	cli "github.com/urfave/cli/v2"
)

type request struct {
	Args   []string          `json:"args"`
	Env    map[string]string `json:"env"`
	Config *string           `json:"config"`
}

type answer struct {
	Strategies  []string `json:"strategies,omitempty"`
	MigStrategy string   `json:"migStrategy,omitempty"`
	Error       string   `json:"error,omitempty"`
}

// The flags as the plugin declares them (k8s-device-plugin v0.19.3
// cmd/nvidia-device-plugin/main.go: device-list-strategy, lines 92-97; config-file, 168-173;
// mig-strategy, 61-66), so that the library parses them and their variables as it does there.
func flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "mig-strategy", Value: spec.MigStrategyNone,
			EnvVars: []string{"MIG_STRATEGY"}},
		&cli.StringSliceFlag{Name: "device-list-strategy",
			Value:   cli.NewStringSlice(string(spec.DeviceListStrategyEnvVar)),
			EnvVars: []string{"DEVICE_LIST_STRATEGY"}},
		&cli.StringFlag{Name: "config-file", EnvVars: []string{"CONFIG_FILE"}},
	}
}

var watched = []string{"MIG_STRATEGY", "DEVICE_LIST_STRATEGY", "CONFIG_FILE"}

func decide(dir string, r request) answer {
	for _, k := range watched {
		os.Unsetenv(k)
	}
	for k, v := range r.Env {
		os.Setenv(k, v)
	}
	args := r.Args
	if r.Config != nil {
		path := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(path, []byte(*r.Config), 0o600); err != nil {
			return answer{Error: err.Error()}
		}
		// The config file is named as the case names it (flag or variable); the judge only
		// puts its text where that name points.
		for i, a := range args {
			if a == "--config-file" && i+1 < len(args) {
				args[i+1] = path
			} else if len(a) > len("--config-file=") && a[:len("--config-file=")] == "--config-file=" {
				args[i] = "--config-file=" + path
			}
		}
		if v := r.Env["CONFIG_FILE"]; v != "" {
			os.Setenv("CONFIG_FILE", path)
		}
	}
	var out answer
	fl := flags()
	app := &cli.App{Name: "nvidia-device-plugin", Flags: fl,
		Action: func(c *cli.Context) error {
			config, err := spec.NewConfig(c, fl)
			if err != nil {
				return fmt.Errorf("unable to load config: %v", err)
			}
			if _, err := spec.NewDeviceListStrategies(*config.Flags.Plugin.DeviceListStrategy); err != nil {
				return fmt.Errorf("invalid --device-list-strategy option: %v", err)
			}
			// validateFlags' MIG check (cmd/nvidia-device-plugin/main.go, lines 222-228),
			// which runs with the rest of validateFlags where NVML is at hand
			switch *config.Flags.MigStrategy {
			case spec.MigStrategyNone, spec.MigStrategySingle, spec.MigStrategyMixed:
			default:
				return fmt.Errorf("unknown MIG strategy: %v", *config.Flags.MigStrategy)
			}
			out.Strategies = append([]string{}, *config.Flags.Plugin.DeviceListStrategy...)
			out.MigStrategy = *config.Flags.MigStrategy
			return nil
		}}
	app.Writer, app.ErrWriter = os.Stderr, os.Stderr
	if err := app.Run(append([]string{"nvidia-device-plugin"}, args...)); err != nil {
		return answer{Error: err.Error()}
	}
	return out
}

func main() {
	dir, err := os.MkdirTemp("", "plugin-judge")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	enc := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var r request
		if err := json.Unmarshal(in.Bytes(), &r); err != nil {
			enc.Encode(answer{Error: "bad request: " + err.Error()})
			continue
		}
		enc.Encode(decide(dir, r))
	}
}
