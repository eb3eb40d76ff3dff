# The two commands everything else builds on: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
RUN    ?= .run
PORT   ?= 8443

.PHONY: run test bench clean

$(VENV)/.installed: pyproject.toml constraints.txt
	@echo "make: first run: creating $(VENV) and installing gpupool with its test tools" \
	  "(pinned in constraints.txt; about a minute, once)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $@
	@echo "make: $(VENV) ready"

# Serve the built-in policy against the bundled demo cluster on https://127.0.0.1:$(PORT).
run: $(VENV)/.installed
	$(PY) -m webhook certs generate --out $(RUN)/certs --ip 127.0.0.1 --dns localhost >/dev/null
	@echo "gpupool on https://127.0.0.1:$(PORT) (built-in policy, demo cluster). Try, from another shell:"
	@echo "  curl -s --cacert $(RUN)/certs/ca.crt -H 'Content-Type: application/json' \\"
	@echo "    --data @docs/examples/review-hami-pod.json https://127.0.0.1:$(PORT)/mutate | $(PYTHON) -m json.tool"
	@echo "  (and review-hami-pod-validate.json to /validate: denied, hami-node-1 lacks its CDI devices)"
	exec $(PY) -m webhook serve --bind 127.0.0.1:$(PORT) --demo \
	  --cert $(RUN)/certs/tls.crt --key $(RUN)/certs/tls.key

# The whole suite: lint, strict type check (webhook/), unit, HTTPS and end-to-end tests.
test: $(VENV)/.installed
	$(PY) -m ruff check webhook tests bench
	$(PY) -m mypy
	$(PY) -m pytest

# Benchmarks (not tests): throughput and latency against a same-run baseline, decision cost
# as the cluster grows, agent cost. Needs wrk (Debian's package), installed here if missing.
bench: $(VENV)/.installed
	@command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	$(PY) -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(RUN) .pytest_cache
