// HAMi's real mutating webhook (github.com/Project-HAMi/HAMi pkg/scheduler, v2.10.0), served
// over TLS the way HAMi's scheduler serves it (path /webhook), for gpupool's end-to-end tests.
// Test infrastructure only: the product imports none of it.
package main

import (
	"flag"
	"log"
	"net/http"

	"github.com/Project-HAMi/HAMi/pkg/scheduler"
	"github.com/Project-HAMi/HAMi/pkg/scheduler/config"
	"k8s.io/klog/v2"
)

func main() {
	klog.InitFlags(nil)
	bind := flag.String("bind", "127.0.0.1:0", "address to listen on")
	cert := flag.String("cert", "", "TLS certificate (PEM)")
	key := flag.String("key", "", "TLS key (PEM)")
	name := flag.String("scheduler-name", "hami-scheduler", "HAMi's scheduler name (chart default)")
	force := flag.Bool("force-overwrite-default-scheduler", true,
		"rewrite default-scheduler to HAMi's scheduler (chart default: true)")
	flag.Parse()

	config.InitDefaultDevices()
	config.SchedulerName = *name
	config.ForceOverwriteDefaultScheduler = *force
	wh, err := scheduler.NewWebHook()
	if err != nil {
		log.Fatalf("hami webhook: %v", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/webhook", wh)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	log.Printf("serving HAMi's webhook on https://%s/webhook", *bind)
	log.Fatal(http.ListenAndServeTLS(*bind, *cert, *key, mux))
}
