"""What ``kvconform gate --dry-run`` selects for changes to a real vLLM ``kv_transfer`` tree."""

from __future__ import annotations

import pytest

from kvconform.conformance.vllm_install.import_graph import (
    EVERY_CONNECTOR,
    IMPORT_GRAPH_ROOTS,
    compile_glob,
    shared_reason,
)
from tests.gate.vllm_checkout import CONNECTORS, FACTORY, VLLM_SOURCE, git, installed_connector_names

V1 = f"{CONNECTORS}/v1"
NIXL_NAMES = ["NixlConnector", "NixlPullConnector", "NixlPushConnector"]


def selected(gate, repo, head: str) -> dict:
    result = gate("--repo", str(repo.path), "--base", repo.base, "--head", head, "--dry-run", "--json")
    assert result.status == 0, result.err
    return result.json()


def test_the_example_connector_selects_itself_and_its_wrapper_only(gate, vllm_repo):
    head = vllm_repo.touch(f"{V1}/example_connector.py")
    got = selected(gate, vllm_repo, head)
    assert got == {
        "changed_files": [f"{V1}/example_connector.py"],
        "connectors": ["ExampleConnector", "MultiConnector"],
        "reasons": {"ExampleConnector": [f"{V1}/example_connector.py"],
                    "MultiConnector": [f"{V1}/example_connector.py"]},
    }


def test_the_wrapper_alone_does_not_select_what_it_wraps(gate, vllm_repo):
    head = vllm_repo.touch(f"{V1}/multi_connector.py")
    assert selected(gate, vllm_repo, head)["connectors"] == ["MultiConnector"]


@pytest.mark.parametrize("shared", [f"{V1}/base.py", f"{CONNECTORS}/base.py", FACTORY, f"{CONNECTORS}/utils.py",
                                    "vllm/v1/kv_cache_layout.py", "vllm/v1/attention/backends/cpu_attn.py"])
def test_shared_infrastructure_selects_every_registered_connector(gate, vllm_repo, shared):
    head = vllm_repo.touch(shared)
    got = selected(gate, vllm_repo, head)
    names = installed_connector_names()
    assert len(names) >= 17 and "ExampleConnector" in names  # the oracle read something real
    assert got["connectors"] == names
    assert all(got["reasons"][name] == [shared] for name in names)


def test_a_new_file_matching_a_shared_glob_selects_every_connector(gate, vllm_repo):
    head = vllm_repo.commit({"vllm/v1/worker/gpu/kv_connector.py": "x = 1\n"})
    assert selected(gate, vllm_repo, head)["connectors"] == installed_connector_names()


def test_a_readme_change_selects_nothing(gate, vllm_repo):
    head = vllm_repo.touch("README.md")
    assert selected(gate, vllm_repo, head) == {"changed_files": ["README.md"], "connectors": [], "reasons": {}}


def test_any_file_of_the_nixl_package_selects_the_three_nixl_names(gate, vllm_repo):
    for path in (f"{V1}/nixl/__init__.py", f"{V1}/nixl/utils.py"):
        head = vllm_repo.touch(path)
        got = selected(gate, vllm_repo, head)
        assert got["connectors"] == NIXL_NAMES, path
        vllm_repo.base = head


def test_a_file_added_to_a_connector_package_selects_it(gate, vllm_repo):
    head = vllm_repo.commit({f"{V1}/nixl/new_helper.py": "X = 1\n"})
    assert selected(gate, vllm_repo, head)["connectors"] == NIXL_NAMES


def test_a_helper_selects_the_connectors_that_import_it(gate, vllm_repo):
    # offloading/worker.py belongs to no connector by name; offloading_connector.py imports it.
    head = vllm_repo.touch(f"{V1}/offloading/worker.py")
    assert selected(gate, vllm_repo, head)["connectors"] == ["OffloadingConnector"]


def test_a_helper_in_a_shared_folder_selects_only_its_importers(gate, vllm_repo):
    # mooncake/rdma_utils.py is imported by the Mooncake store's worker, not by MooncakeConnector.
    head = vllm_repo.touch(f"{V1}/mooncake/rdma_utils.py")
    assert selected(gate, vllm_repo, head)["connectors"] == ["MooncakeStoreConnector"]


def test_a_helper_nobody_imports_selects_nothing(gate, vllm_repo):
    head = vllm_repo.commit({f"{V1}/unused_helper.py": "X = 1\n"})
    assert selected(gate, vllm_repo, head)["connectors"] == []


def test_a_new_import_makes_a_helper_count(gate, vllm_repo):
    example = vllm_repo.path / V1 / "example_connector.py"
    vllm_repo.base = vllm_repo.commit({f"{V1}/shared_helper.py": "X = 1\n",
                                       f"{V1}/example_connector.py": example.read_text()
                                       + "\nfrom . import shared_helper  # noqa\n"})
    head = vllm_repo.touch(f"{V1}/shared_helper.py")
    assert selected(gate, vllm_repo, head)["connectors"] == ["ExampleConnector", "MultiConnector"]


def test_deleting_a_connector_module_still_selects_it(gate, vllm_repo):
    head = vllm_repo.commit({f"{V1}/decode_bench_connector.py": None})
    assert selected(gate, vllm_repo, head)["connectors"] == ["DecodeBenchConnector"]


def test_a_rename_reports_both_paths(gate, vllm_repo):
    old, new = f"{V1}/example_connector.py", "docs/example_connector.py"
    text = (vllm_repo.path / old).read_text()
    head = vllm_repo.commit({new: text, old: None})
    got = selected(gate, vllm_repo, head)
    assert set(got["changed_files"]) == {old, new}
    assert got["reasons"]["ExampleConnector"] == [old]


def test_the_diff_is_what_head_added_since_it_forked_from_base(gate, vllm_repo):
    fork = vllm_repo.base
    head = vllm_repo.touch(f"{V1}/example_connector.py")
    # base moves on after the fork: its changes are not the pull request's
    git(vllm_repo.path, "checkout", "-q", "-b", "upstream", fork)
    upstream = vllm_repo.touch(f"{V1}/base.py")
    vllm_repo.base = upstream
    assert selected(gate, vllm_repo, head)["connectors"] == ["ExampleConnector", "MultiConnector"]


def test_head_defaults_to_HEAD(gate, vllm_repo):
    vllm_repo.touch(f"{V1}/decode_bench_connector.py")
    result = gate("--repo", str(vllm_repo.path), "--base", vllm_repo.base, "--dry-run", "--json")
    assert result.json()["connectors"] == ["DecodeBenchConnector"]


def test_the_registry_is_read_from_the_checkout_not_the_installed_vllm(gate, vllm_repo):
    factory = (vllm_repo.path / FACTORY).read_text()
    registration = ('\nKVConnectorFactory.register_connector(\n    "BrandNewConnector",\n'
                    '    "vllm.distributed.kv_transfer.kv_connector.v1.brand_new",\n    "BrandNewConnector",\n)\n')
    vllm_repo.base = vllm_repo.commit({FACTORY: factory + registration})
    head = vllm_repo.commit({f"{V1}/brand_new/__init__.py": "X = 1\n"})
    assert selected(gate, vllm_repo, head)["connectors"] == ["BrandNewConnector"]


def test_the_readable_summary_names_files_connectors_and_platforms(gate, vllm_repo):
    head = vllm_repo.touch(f"{V1}/example_connector.py", "README.md")
    result = gate("--repo", str(vllm_repo.path), "--base", vllm_repo.base, "--head", head, "--dry-run")
    assert result.status == 0
    assert "README.md: no connector loads it" in result.out
    assert "example_connector.py: the own module of ExampleConnector" in result.out
    assert "MultiConnector on cuda, rocm, xpu, cpu: wraps ExampleConnector" in result.out


def test_a_connector_claiming_one_platform_is_shown_with_it(gate, vllm_repo):
    head = vllm_repo.touch(f"{V1}/moriio/moriio_common.py")
    result = gate("--repo", str(vllm_repo.path), "--base", vllm_repo.base, "--head", head, "--dry-run")
    assert "MoRIIOConnector on rocm:" in result.out


def test_every_row_of_the_shared_table_matches_a_file_of_the_installed_vllm():
    """A row that matches nothing is stale (vLLM moved the file) and would silently select nothing."""
    files = [str(p.relative_to(VLLM_SOURCE.parent)) for p in VLLM_SOURCE.rglob("*.py")]
    stale = [pattern for pattern in EVERY_CONNECTOR if not any(compile_glob(pattern).fullmatch(f) for f in files)]
    assert stale == []
    assert all((VLLM_SOURCE.parent / root).is_dir() for root in IMPORT_GRAPH_ROOTS)


@pytest.mark.parametrize("path, shared", [
    ("vllm/v1/worker/kv_connector_model_runner_mixin.py", True),
    ("vllm/v1/worker/gpu/kv_connector.py", True),
    ("vllm/v1/worker/gpu_model_runner.py", False),
    ("vllm/v1/core/kv_cache_utils.py", True),
    ("vllm/v1/core/sched/kv_cache_utils.py", False),  # * stays within one folder
    ("vllm/v1/attention/backends/mla/flashmla.py", True),  # a trailing /** is everything below
    ("vllm/v1/attention/backendsX/flash_attn.py", False),
    (f"{V1}/base.py", True),
    (f"{V1}/base.pyc", False),
])
def test_shared_globs(path, shared):
    assert (shared_reason(path) is not None) == shared
