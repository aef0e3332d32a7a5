"""Shared set-up of the project's own tests, and which of them need vLLM.

The tests that need no vLLM (reports, pipelines, the CLI, lint rules on synthetic files, expectations parsing,
docs) say the same on every vLLM release, so they run once; the others import or drive vLLM (a rig, a suite
run, vLLM's objects). ``NO_VLLM`` names the first kind, by folder or module; every other test is marked
``needs_vllm`` (``make check`` runs ``-m 'not needs_vllm'``, ``make test`` ``-m needs_vllm``); of those, the
ones ``ONE_RELEASE_TESTS`` names are also marked ``one_release`` and run on the default release only (``make
test-vllm034`` runs ``-m 'needs_vllm and not one_release'``). The once-only set runs with vLLM made
unimportable (tests/no_vllm/sitecustomize.py), so a test listed here that reaches vLLM fails there, and a skip
for want of vLLM counts as that failure.
"""

import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
NEEDS_VLLM = "needs_vllm"
ONE_RELEASE = "one_release"

# Paths under tests/ whose tests need no vLLM: a module, or a folder (ending in "/") whose every module, new
# ones included, must need none. A module that mixes both kinds stays unlisted and runs on every release, as
# does every new module until it is listed here.
NO_VLLM = (
    "bench/test_bench_expected.py",
    "bench/test_bench_harness.py",
    "bench/test_bench_report.py",
    "bench/test_phase_probe.py",
    "bench/test_suite_timing.py",
    "cli/test_cli_version_help.py",
    "docs/",
    "expectations/test_expectations_load.py",
    "expectations/test_expectations_untested.py",
    "expectations/test_expectations_vllm.py",
    "checks/test_claims.py",
    "checks/test_offload_events.py",
    "checks/test_offload_tier.py",
    "checks/test_pair_bounds.py",
    "checks/test_finished_blocks.py",
    "checks/test_wrapper_claims.py",
    "checks/test_usage_gauges.py",
    "checks/test_verdicts.py",
    "connectors/test_missing_module.py",
    "connectors/test_plugin_discovery.py",
    "coverage/test_coverage_report.py",
    "coverage/test_floor.py",
    "coverage/test_measure.py",
    "engine/test_affinity.py",
    "engine/test_check_failure.py",
    "engine/test_closing.py",
    "engine/test_published.py",
    "engine/test_scheduler_outputs.py",
    "engine/test_transfer_reports.py",
    "engine/test_vllm_assertions_paths.py",
    "reliability/test_gc_between_tests.py",
    "reliability/test_watchdog.py",
    "shared_run/",
    "install/",
    "lint/test_lint_accelerator.py",
    "lint/test_lint_expectations.py",
    "lint/test_lint_guards.py",
    "lint/test_lint_keys.py",
    "lint/test_lint_package.py",
    "lint/test_lint_rules.py",
    "lint/test_lint_suppression.py",
    "mutation/test_children.py",
    "mutation/test_command_input.py",
    "mutation/test_generate.py",
    "mutation/test_places.py",
    "mutation/test_runner.py",
    "mutation/test_selection.py",
    "mutation/test_swap.py",
    "mutation/test_changed_lines.py",
    "pipelines/test_pipelines_cli.py",
    "pipelines/test_pipelines_commands.py",
    "pipelines/test_pipelines_generate.py",
    "pipelines/test_pipelines_image_deps.py",
    "pipelines/test_pipelines_lanes.py",
    "platforms/test_detection.py",
    "reliability/test_deferred_private_index.py",
    "reliability/test_deferred_protocol.py",
    "reliability/test_reliability_parts.py",
    "reliability/test_vllm_window.py",
    "reports/test_compare.py",
    "reports/test_mutation_floor.py",
    "reports/test_releases.py",
    "reports/test_junit.py",
    "reports/test_render_mutation.py",
    "reports/test_report_browser.py",
    "reports/test_report_cli.py",
    "reports/test_report_harness_cause.py",
    "reports/test_report_layout.py",
    "reports/test_report_readers.py",
    "reports/test_report_sections.py",
    "reports/test_report_unconstructed.py",
    "connectors/test_no_profile.py",
    "connectors/test_host_lock.py",
    "connectors/test_connector_env.py",
    "connectors/test_services.py",
    "plugin/test_scheduling.py",
    "vllm_install/test_lookups.py",
    "workload/test_seeded_workloads.py",
    "workload/test_workload_peer_promise.py",
    "workload/test_workload_spec.py",
)


def needs_vllm(path: Path) -> bool:
    """Whether the tests of the module at ``path`` need vLLM: every module ``NO_VLLM`` does not name."""
    try:
        relative = path.relative_to(TESTS).as_posix()
    except ValueError:
        return True
    return not any(relative.startswith(entry) if entry.endswith("/") else relative == entry for entry in NO_VLLM)


# Tests under tests/ (a folder, ending in "/", or a module) that need vLLM but check kvconform's own machinery
# around it (crash isolation and
# timeouts, the gate's overlay and verdict, generated pipelines run for real, third-party services, xdist
# scheduling): what they say does not change with the release, so they run on the default release only (make
# test). Every other test that needs vLLM (the harness against vLLM's internals, the self-tests' broken connectors,
# the lint over vLLM's source, expectations' vLLM ranges, workloads) runs on the newest release too.
ONE_RELEASE_TESTS = ("gate/", "reliability/", "warm_python/", "pipelines/", "smoke/", "connectors/test_services.py",
                     "connectors/test_nixl_device_buffer.py", "engine/test_accelerator_worker.py",
                     "engine/test_backend_reaches_vllm.py", "plugin/test_scheduling.py", "session/test_devices.py",
                     "mutation/test_mutate_command.py", "checks/test_offloading_situations_catches.py",
                     "checks/test_scheduler_paths_catches.py", "checks/test_offloading_sliding_catches.py",
                     "checks/test_offloading_stats_catches.py", "checks/test_offloading_eviction_catches.py",
                     "checks/test_simple_offload_catches.py", "checks/test_example_resume_catches.py",
                     "checks/test_hybrid_prefill_catches.py", "checks/test_offloading_chunks_catches.py",
                     # kvconform's own machinery run on a real suite: held reports and background shutdowns, the
                     # CLI and options, coverage combined across workers, the report's reading of real sessions,
                     # the plugin inert elsewhere, expectations under xdist
                     "checks/test_shutdown_catches.py", "platforms/test_cli_and_options.py",
                     "coverage/test_suite_coverage.py", "reports/test_report_real_pytest.py",
                     "plugin/test_plugin_inert.py", "expectations/test_expectations_plugin.py")


def one_release(path: Path) -> bool:
    try:
        relative = path.relative_to(TESTS).as_posix()
    except ValueError:
        return False
    return relative.startswith(ONE_RELEASE_TESTS)


def needs_vllm_throughout(folder: Path) -> bool:
    """Whether every module under ``folder`` needs vLLM: ``NO_VLLM`` names none (its conftest may import it)."""
    try:
        relative = folder.relative_to(TESTS).as_posix() + "/"
    except ValueError:
        return False
    if relative == "./":
        return False
    return not any(entry.startswith(relative) or relative.startswith(entry) for entry in NO_VLLM)


def vllm_blocked_note() -> str | None:
    """The note vLLM's import fails with in this process, where tests/no_vllm blocks it; else None."""
    return getattr(sys.modules.get("sitecustomize"), "BLOCKED_NOTE", None)


def pytest_ignore_collect(collection_path):
    """Where vLLM is blocked, the modules (and folders, with their conftests) that need it are not collected:
    importing them would fail for that alone."""
    if vllm_blocked_note() is None:
        return None
    if collection_path.is_dir():
        return True if needs_vllm_throughout(collection_path) else None
    return True if collection_path.suffix == ".py" and needs_vllm(collection_path) else None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Marks before ``-m`` selects: pytest's own selection runs after this hook."""
    for item in items:
        if needs_vllm(item.path) and item.get_closest_marker(NEEDS_VLLM) is None:
            item.add_marker(NEEDS_VLLM)
            if one_release(item.path):
                item.add_marker(ONE_RELEASE)


def pytest_collection_finish(session):
    """Where vLLM is blocked, a selected test that needs it would fail for that alone: refuse the run."""
    if vllm_blocked_note() is None:
        return
    selected = [item.nodeid for item in session.items if item.get_closest_marker(NEEDS_VLLM)]
    if selected:
        raise pytest.UsageError(
            f"vLLM is blocked (tests/no_vllm on PYTHONPATH) but {len(selected)} selected tests need it, "
            f"{selected[0]} first: add -m 'not {NEEDS_VLLM}'"
        )


def _failed_if_skipped_for_vllm(report):
    """A skip for want of vLLM where the blocker refused it means the test needs vLLM: a failure."""
    note = vllm_blocked_note()
    if note is not None and report.skipped and note in str(report.longrepr):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped for want of vLLM in the tests that need none: {reason}"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    return _failed_if_skipped_for_vllm((yield))


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    return _failed_if_skipped_for_vllm((yield))


@pytest.fixture
def pytester(pytester, monkeypatch):
    """pytester's in-process runs drop from ``sys.modules`` every module the run imported, and vLLM's compiled
    modules and custom ops cannot load twice in a process ("Duplicate op name", "bad call flags"). A conformance
    run's session check (conformance/plugin/preflight.py) imports vLLM's config and internals, so the runs these
    tests make in process leave it out; tests/plugin runs it for real, in subprocesses."""
    addopts = os.environ.get("PYTEST_ADDOPTS", "")
    monkeypatch.setenv("PYTEST_ADDOPTS", f"{addopts} -p no:kvconform.conformance.plugin.preflight".strip())
    return pytester


@pytest.fixture(autouse=True)
def _output_as_on_a_terminal(monkeypatch):
    """pytest stops truncating its short summary lines when CI or BUILD_NUMBER is set, so a test
    that counts a message in a pytester run would count differently on a CI host; every run these
    tests start sees the environment a developer's terminal has."""
    for variable in ("CI", "BUILD_NUMBER"):
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture(scope="session")
def shared_suite(request, tmp_path_factory):
    """The self-tests' shared suite runs (tests/shared_run/runner.py): ``shared_suite.results(RUN)``."""
    from tests.shared_run.runner import SharedSuite

    return SharedSuite.of_session(request.session, tmp_path_factory)
