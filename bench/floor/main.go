// Command floor is a stand-in admission webhook for bench/e2e_load.py: it does nothing a
// webhook could do less of. Registered in gpupool's place (same rules, same matchConditions,
// a mutating and a validating call per GPU pod) it shows what that pattern of calls costs the
// API server on its own, whatever serves it; registered in HAMi's place (one mutating call
// for every pod) it shows the same for HAMi's pattern. It is not gpupool and decides nothing.
//
// Every path whose name starts with /mutate, and /webhook (HAMi's path), answers with a
// JSON patch adding the annotation given with --mark, so the API server applies a mutation
// and runs its reinvocation pass as it does after gpupool's (a dry run that shows the
// annotation tells the bench the stand-in is registered); /healthz answers "ok"; every other
// path answers "allowed".
package main

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"
)

type review struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    struct {
		UID    string `json:"uid"`
		Object struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		} `json:"object"`
	} `json:"request"`
}

type response struct {
	UID       string `json:"uid"`
	Allowed   bool   `json:"allowed"`
	PatchType string `json:"patchType,omitempty"`
	Patch     string `json:"patch,omitempty"`
}

// patch adds the annotation mark; where the pod has no annotations yet it adds the map itself (a JSON
// patch cannot add a key to a map that is not there).
func patch(annotations map[string]string, mark string) string {
	var ops string
	if annotations == nil {
		ops = fmt.Sprintf(`[{"op":"add","path":"/metadata/annotations","value":{%q:"1"}}]`,
			mark)
	} else {
		ops = fmt.Sprintf(`[{"op":"add","path":"/metadata/annotations/%s","value":"1"}]`,
			strings.ReplaceAll(mark, "/", "~1"))
	}
	return base64.StdEncoding.EncodeToString([]byte(ops))
}

func serve(w http.ResponseWriter, r *http.Request, mark string) {
	var in review
	if r.URL.Path == "/healthz" {
		_, _ = w.Write([]byte("ok"))
		return
	}
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Request.UID == "" {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	out := response{UID: in.Request.UID, Allowed: true}
	if strings.HasPrefix(r.URL.Path, "/mutate") || r.URL.Path == "/webhook" {
		out.PatchType = "JSONPatch"
		out.Patch = patch(in.Request.Object.Metadata.Annotations, mark)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"apiVersion": in.APIVersion, "kind": in.Kind, "response": out})
}

func main() {
	bind := flag.String("bind", "127.0.0.1:9443", "address to listen on")
	cert := flag.String("cert", "", "TLS certificate (PEM)")
	key := flag.String("key", "", "TLS key (PEM)")
	mark := flag.String("mark", "", "the annotation a mutation adds")
	flag.Parse()
	if *cert == "" || *key == "" || *mark == "" {
		fmt.Fprintln(os.Stderr, "floor: give --cert, --key and --mark")
		os.Exit(2)
	}
	handler := func(w http.ResponseWriter, r *http.Request) { serve(w, r, *mark) }
	srv := &http.Server{Addr: *bind, Handler: http.HandlerFunc(handler),
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}}
	log.Fatal(srv.ListenAndServeTLS(*cert, *key))
}
