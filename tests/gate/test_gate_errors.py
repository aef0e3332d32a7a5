"""Bad input to ``kvconform gate``: one line on stderr, exit status 2, never a traceback."""

from __future__ import annotations

import pytest

from tests.gate.vllm_checkout import FACTORY, git


def assert_one_line_error(result, *fragments: str) -> None:
    assert result.status == 2, result.out
    assert result.err.startswith("kvconform gate: error: ") and result.err.count("\n") == 1, result.err
    assert "Traceback" not in result.err
    for fragment in fragments:
        assert fragment in result.err


def test_a_missing_folder(gate, tmp_path):
    result = gate("--repo", str(tmp_path / "nowhere"), "--base", "HEAD", "--dry-run")
    assert_one_line_error(result, "no such directory")


def test_a_folder_that_is_not_a_git_repository(gate, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    result = gate("--repo", str(plain), "--base", "HEAD", "--dry-run")
    assert_one_line_error(result, "not a git repository")


@pytest.mark.parametrize("flag", ["--base", "--head"])
@pytest.mark.parametrize("ref", ["no-such-branch", "0" * 40, "HEAD~999", "-rf", "--output=x", ""])
def test_a_ref_that_names_no_commit(gate, vllm_repo, flag, ref):
    other = {"--base": "--head", "--head": "--base"}[flag]
    result = gate("--repo", str(vllm_repo.path), other, "HEAD", f"{flag}={ref}", "--dry-run")
    assert_one_line_error(result, flag)


def test_a_ref_naming_a_tree_not_a_commit(gate, vllm_repo):
    tree = git(vllm_repo.path, "rev-parse", "HEAD^{tree}")
    result = gate("--repo", str(vllm_repo.path), "--base", tree, "--dry-run")
    assert_one_line_error(result, "no such commit")


def test_a_checkout_without_the_factory(gate, vllm_repo):
    head = vllm_repo.commit({FACTORY: None})
    result = gate("--repo", str(vllm_repo.path), "--base", vllm_repo.base, "--head", head, "--dry-run")
    assert_one_line_error(result, FACTORY, "vLLM checkout")


def test_a_factory_that_does_not_parse(gate, vllm_repo):
    head = vllm_repo.commit({FACTORY: "def broken(:\n"})
    result = gate("--repo", str(vllm_repo.path), "--base", vllm_repo.base, "--head", head, "--dry-run")
    assert_one_line_error(result, "cannot parse the connector factory")


def test_a_factory_that_registers_nothing(gate, vllm_repo):
    head = vllm_repo.commit({FACTORY: "class KVConnectorFactory:\n    pass\n"})
    result = gate("--repo", str(vllm_repo.path), "--base", vllm_repo.base, "--head", head, "--dry-run")
    assert_one_line_error(result, "registers no connectors")


@pytest.mark.parametrize("modes", [(), ("--dry-run", "--run"), ("--run", "--emit-pipeline"),
                                   ("--dry-run", "--run", "--emit-pipeline")])
def test_modes_are_mutually_exclusive_and_one_is_needed(gate, vllm_repo, modes):
    result = gate("--repo", str(vllm_repo.path), "--base", "HEAD", *modes)
    assert_one_line_error(result, "choose exactly one of --dry-run, --run, --emit-pipeline")


def test_json_belongs_to_dry_run(gate, vllm_repo):
    result = gate("--repo", str(vllm_repo.path), "--base", "HEAD", "--run", "--json")
    assert_one_line_error(result, "--json goes with --dry-run")


def test_an_unwritable_pipeline_file(gate, vllm_repo, tmp_path):
    head = vllm_repo.touch("vllm/distributed/kv_transfer/kv_connector/v1/example_connector.py")
    result = gate("--repo", str(vllm_repo.path), "--base", vllm_repo.base, "--head", head,
                  "--emit-pipeline", "-o", str(tmp_path / "missing-dir" / "pipeline.yml"))
    assert_one_line_error(result, "cannot write")
