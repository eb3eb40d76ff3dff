// nri-inject runs NVIDIA's NRI plugin (nvidia-container-toolkit v1.20.2,
// cmd/nvidia-ctk-installer/container/runtime/nri) against the runtime side of NRI
// (containerd/nri's adaptation, the library containerd itself hosts plugins with), creates one
// container of an annotated pod, and applies the plugin's adjustment with NRI's own spec
// generator and the CDI library, as containerd does. It prints one JSON line:
//
//	{"ok": bool, "error": "...", "injected": [...], "devices": [...], "log": [...]}
//
// "injected" is what the plugin asked containerd to inject; "ok" false with an error is a
// container containerd would fail to create (an unresolvable CDI device).
//
//	nri-inject --spec-dir DIR --allow NS [--allow NS] --namespace NS --container NAME \
//	    --annotation KEY=VALUE...
//
// No containerd runs here: the adaptation's socket, the plugin's registration and the
// CreateContainer round trip over ttrpc are the real ones.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk-installer/container/runtime/nri"
	nriapi "github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/runtime-tools/generate"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	rgen "github.com/opencontainers/runtime-tools/generate"
	"gpupool.test/oracle/internal/cdiinject"
)

type result struct {
	OK       bool     `json:"ok"`
	Error    string   `json:"error,omitempty"`
	Injected []string `json:"injected"`
	Devices  []string `json:"devices"`
	Env      []string `json:"env,omitempty"`
	Log      []string `json:"log,omitempty"`
}

// recorder is the toolkit logger the plugin writes to; its lines go into the result.
type recorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *recorder) add(level, f string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, level+": "+fmt.Sprintf(f, a...))
}
func (r *recorder) Debugf(f string, a ...any)   {}
func (r *recorder) Tracef(f string, a ...any)   {}
func (r *recorder) Infof(f string, a ...any)    { r.add("info", f, a...) }
func (r *recorder) Warningf(f string, a ...any) { r.add("warning", f, a...) }
func (r *recorder) Errorf(f string, a ...any)   { r.add("error", f, a...) }

// ready is the adaptation's metrics sink, used only to learn when the plugin is registered
// and synchronised (the adaptation counts it among its plugins then).
type ready struct{ c chan struct{} }

func (ready) RecordPluginInvocation(string, string, error)                                  {}
func (ready) RecordPluginLatency(string, string, time.Duration)                             {}
func (ready) RecordPluginAdjustments(string, string, *nriapi.ContainerAdjustment, int, int) {}
func (r ready) UpdatePluginCount(n int) {
	if n > 0 {
		select {
		case r.c <- struct{}{}:
		default:
		}
	}
}

func main() {
	var specDirs, allow, annotations cdiinject.Strings
	namespace := flag.String("namespace", "default", "the pod's namespace")
	container := flag.String("container", "main", "the container's name")
	flag.Var(&specDirs, "spec-dir", "a CDI spec directory, in priority order (repeatable)")
	flag.Var(&allow, "allow", "a namespace allowed management CDI devices (repeatable)")
	flag.Var(&annotations, "annotation", "a pod annotation KEY=VALUE (repeatable)")
	flag.Parse()
	out, err := run(specDirs, allow, annotations, *namespace, *container)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nri-inject:", err)
		os.Exit(2)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

func run(specDirs, allow, annotations []string, namespace, container string) (*result, error) {
	dir, err := os.MkdirTemp("", "nri-inject")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	for _, d := range []string{"plugins", "conf.d"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	socket := filepath.Join(dir, "nri.sock")
	sig := ready{c: make(chan struct{}, 1)}
	noSync := func(ctx context.Context, cb nriapi.SyncCB) error {
		_, err := cb(ctx, nil, nil)
		return err
	}
	noUpdate := func(context.Context, []*nriapi.ContainerUpdate) ([]*nriapi.ContainerUpdate, error) {
		return nil, nil
	}
	rt, err := nriapi.New("containerd", "v2", noSync, noUpdate,
		nriapi.WithSocketPath(socket), nriapi.WithPluginPath(filepath.Join(dir, "plugins")),
		nriapi.WithPluginConfigPath(filepath.Join(dir, "conf.d")), nriapi.WithMetrics(sig))
	if err != nil {
		return nil, fmt.Errorf("NRI runtime side: %w", err)
	}
	if err := rt.Start(); err != nil {
		return nil, fmt.Errorf("NRI runtime side: %w", err)
	}
	defer rt.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := &recorder{}
	plugin := nri.NewPlugin(ctx, log, allow)
	if err := plugin.Start(ctx, socket, "10"); err != nil {
		return nil, fmt.Errorf("NVIDIA NRI plugin: %w", err)
	}
	defer plugin.Stop()
	select {
	case <-sig.c:
	case <-ctx.Done():
		return nil, fmt.Errorf("NVIDIA NRI plugin never registered")
	}

	pod := &api.PodSandbox{Id: "pod0", Name: "pod", Uid: "uid0", Namespace: namespace,
		Annotations: map[string]string{}}
	for _, a := range annotations {
		k, v, _ := strings.Cut(a, "=")
		pod.Annotations[k] = v
	}
	ctr := &api.Container{Id: "ctr0", PodSandboxId: pod.Id, Name: container}
	resp, err := rt.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: ctr})
	if err != nil {
		return nil, fmt.Errorf("CreateContainer through NRI: %w", err)
	}

	out := &result{Injected: []string{}, Devices: []string{}}
	for _, d := range resp.GetAdjust().GetCDIDevices() {
		out.Injected = append(out.Injected, d.GetName())
	}
	cache, err := cdiinject.Cache(specDirs)
	if err != nil {
		return nil, fmt.Errorf("CDI cache: %w", err)
	}
	spec := &oci.Spec{Process: &oci.Process{Env: []string{}}, Linux: &oci.Linux{}}
	g := generate.SpecGenerator(&rgen.Generator{Config: spec},
		generate.WithCDIDeviceInjector(func(s *oci.Spec, names []string) error {
			// containerd v2.2 internal/cri/nri/nri_api_linux.go -> pkg/cdi WithCDIDevices
			if _, err := cache.InjectDevices(s, names...); err != nil {
				return fmt.Errorf("CDI device injection failed: %w", err)
			}
			return nil
		}))
	if err := g.Adjust(resp.GetAdjust()); err != nil {
		out.Error = err.Error()
	} else {
		out.OK = true
		out.Env = spec.Process.Env
		out.Devices = cdiinject.Devices(spec)
	}
	log.mu.Lock()
	out.Log = append(out.Log, log.lines...)
	log.mu.Unlock()
	return out, nil
}
