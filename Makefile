# The two commands everything else builds on: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
RUN    ?= .run
PORT   ?= 8443

.PHONY: run test unit lint bench bench-guard clean

# A virtualenv made whole, or made again: a first try that stopped half way (an interrupted
# install, a Python too old) leaves no stamp, and the next run starts it over unless what
# is there already works.
$(VENV)/.made:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "make: $(PYTHON) is $$($(PYTHON) --version 2>&1 || echo missing); gpupool needs" \
	    "Python 3.11 or newer: make $(MAKECMDGOALS) PYTHON=python3.12 (or another)" >&2; \
	  exit 2; }
	@if $(PY) -c 'import sys, pip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then \
	  echo "make: [1/3] using $(VENV) ($$($(PY) --version))"; \
	else \
	  echo "make: [1/3] creating $(VENV) with $$($(PYTHON) --version)"; \
	  rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); \
	fi
	@touch $@

# What serving needs (make run), and the test tools on top (make test): pinned in
# constraints.txt, installed once per change of pyproject.toml or constraints.txt.
$(VENV)/.installed-run: $(VENV)/.made pyproject.toml constraints.txt
	@echo "make: [2/3] installing gpupool and what it needs to serve (once)"
	@$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e .
	@touch $@

$(VENV)/.installed: $(VENV)/.made pyproject.toml constraints.txt
	@echo "make: installing gpupool with its test tools (once)"
	@$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]'
	@touch $@ $(VENV)/.installed-run

# Serve the built-in policy against the bundled demo cluster on https://127.0.0.1:$(PORT).
run: $(VENV)/.installed-run
	@echo "make: [3/3] development certificates in $(RUN)/certs"
	@$(PY) -m webhook certs generate --out $(RUN)/certs --ip 127.0.0.1 --dns localhost >/dev/null
	@echo "gpupool on https://127.0.0.1:$(PORT) (built-in policy, demo cluster). Try, from another shell:"
	@echo "  curl -s --cacert $(RUN)/certs/ca.crt -H 'Content-Type: application/json' \\"
	@echo "    --data @docs/examples/review-hami-pod.json https://127.0.0.1:$(PORT)/mutate | $(PYTHON) -m json.tool"
	@echo "  (and review-hami-pod-validate.json to /validate: denied, hami-node-1 lacks its CDI devices)"
	exec $(PY) -m webhook serve --bind 127.0.0.1:$(PORT) --demo \
	  --cert $(RUN)/certs/tls.crt --key $(RUN)/certs/tls.key

# One layer of the suite under pytest, timed; its exit status is the layer's.
define layer
t0=$$(date +%s); $(PY) -m pytest $(2); rc=$$?; \
echo "make: $(1) layer took $$(( $$(date +%s) - t0 )) s (pytest exit $$rc)"; exit $$rc
endef

# Lint (webhook, tests, bench, harness) and the strict type check (webhook, bench, harness:
# pyproject.toml's [tool.mypy] files).
lint: $(VENV)/.installed
	$(PY) -m ruff check webhook tests bench harness
	$(PY) -m mypy

# The fast loop: the unit layer alone, on every core (well under a minute here).
unit: $(VENV)/.installed
	@$(call layer,unit,-n auto tests/unit)

# Two end-to-end files at a time, each file's tests in order on one worker with its own
# control plane: they mostly wait on the programs they drive, so two share the 2 cores.
E2E_PARALLEL = -n 2 --dist loadfile

# The end-to-end tests whose behaviour depends on the Kubernetes release (webhook
# registration, matchConditions and admission, the scheduler-state webhook's CEL, DRA, the
# scan's reports), run again on each older release kept (docs/compatibility.md); the whole
# layer runs on the current one. 1.36 is the first release that serves the routing policy
# (MutatingAdmissionPolicy v1), so routing in the API server is judged there whole.
E2E_RELEASE = tests/e2e/test_dra_chain.py tests/e2e/test_scan.py tests/e2e/test_e2e.py \
  tests/e2e/test_native_routing.py
E2E_RELEASE_K = test_dra_chain or test_scan or non_gpu or dry_run or doctor_against \
  or routed_despite or denied_with_device or access_through or auto_mode

# The whole suite: lint and types, then the unit layer, the HTTPS layer (a real gunicorn,
# the real runtime and CDI library) and the end-to-end layer (a real control plane: 1.37,
# then the release-dependent tests on 1.36 and 1.35), in that order, each timed: the
# quickest answers come first.
test: lint
	@$(call layer,unit,-n auto tests/unit)
	@$(call layer,integration,tests/integration)
	@$(call layer,end-to-end,$(E2E_PARALLEL) tests/e2e)
	@export GPUPOOL_KUBE_RELEASE=1.36; $(call layer,end-to-end on Kubernetes 1.36,$(E2E_PARALLEL) $(E2E_RELEASE) -k "$(E2E_RELEASE_K) or test_native_routing")
	@export GPUPOOL_KUBE_RELEASE=1.35; $(call layer,end-to-end on Kubernetes 1.35,$(E2E_PARALLEL) $(E2E_RELEASE) -k "$(E2E_RELEASE_K)")

# Benchmarks (not tests): throughput and latency against a same-run baseline, decision cost
# as the cluster grows, agent cost. Needs wrk (Debian's package), installed here if missing.
bench: $(VENV)/.installed
	@command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	$(PY) -m bench $(BENCH_ARGS)

# The paired guard (not a test: make test never runs it): this tree's decision and served
# path against bench/reference, a few minutes on 2 cores; exit 1 beyond the limits.
bench-guard: $(VENV)/.installed
	@command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	$(PY) -m bench.guard $(GUARD_ARGS)

clean:
	rm -rf $(VENV) $(RUN) .pytest_cache
