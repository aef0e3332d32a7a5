"""Each rule finds its pattern and nothing else (positive and negative snippets per rule)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvconform.conformance.lint import RULES, lint_files, lint_source

PREAMBLE = "import torch\nfrom vllm.platforms import current_platform\n"


def _cases(rule: str, positives: list[str], negatives: list[str]):
    return ([pytest.param(rule, code, [rule], id=f"{rule}-finds-{code}") for code in positives]
            + [pytest.param(rule, code, [], id=f"{rule}-ignores-{code}") for code in negatives])


CASES = [
    *_cases("KVC001",
            ['kv = load_file(f)["kv_cache"].cuda()', "x.cuda(non_blocking=True)", "self.buf.cuda(1)"],
            ["kv = load_file(f)['kv_cache'].to(dst.device)", "y = torch.cuda.is_available()", "f = x.cuda"]),
    *_cases("KVC002",
            ['d = torch.device("cuda")', 'd = torch.device("cuda:0")', 'd = torch.device("cuda", 1)',
             'd = torch.device(f"cuda:{rank}")', 'd = torch.device("cuda:" + str(rank))',
             'd = torch.device(type="cuda", index=0)'],
            ['d = torch.device("cpu")', "d = torch.device(current_platform.device_type, rank)",
             "d = torch.device(layer.device)", 'd = torch.device("cudagraph")', 'd = other.device("cuda")']),
    *_cases("KVC003",
            ['kv = kv_cpu.to("cuda", non_blocking=True)', 'kv = kv_cpu.to("cuda:1")',
             'kv = load_file(f, device="cuda")', 'b = torch.empty(4, device="cuda:0")',
             'kv = kv_cpu.to(device="cuda")', 'kv = kv_cpu.to(f"cuda:{i}")'],
            ["kv = kv_cpu.to(kv_cache_layer.device, non_blocking=True)",
             "kv = load_file(f, device=str(kv_cache_layer.device))", 'kv = kv.to("cpu")',
             "kv = kv.to(torch.float16)", 'log("cuda")', 'b = torch.empty(4, device="xpu")']),
    *_cases("KVC004",
            ["s = torch.cuda.Stream()", "torch.cuda.synchronize()", "e = torch.cuda.Event(interprocess=True)",
             "with torch.cuda.stream(s):\n    pass", "i = torch.cuda.current_device()",
             "e = torch.cuda.Event.from_ipc_handle(d, h)", "torch.cuda.set_device(0)"],
            ["s: torch.cuda.Stream | None = None", "ok = torch.cuda.is_available()",
             "n = torch.cuda.device_count()", "torch.accelerator.synchronize()",
             "s = current_platform.current_stream()"]),
    *_cases("KVC005",
            ["torch.cuda.empty_cache()", "torch.cuda.manual_seed(0)", "m = torch.cuda.memory_allocated()"],
            ["torch.accelerator.empty_cache()"]),
    *_cases("KVC006",
            ["mla = isinstance(meta, MLACommonMetadata)",
             "mla = isinstance(meta, (FlashAttentionMetadata, FlashMLAMetadata))",
             "mla = isinstance(meta, mla_attention.MLACommonMetadata)",
             "mla = issubclass(cls, MLACommonMetadata)", "mla = type(meta) is MLACommonMetadata"],
            ["mla = isinstance(meta, FlashAttentionMetadata)", "mla = spec.use_mla",
             "mla = isinstance(builder, MLAMetadataBuilder)", "mla = meta is MLACommonMetadata"]),
    *_cases("KVC007",
            ['h = d.to("cpu", non_blocking=True)', 'h = d.to(torch.device("cpu"), non_blocking=True)',
             'h = d.to(device="cpu", non_blocking=True)'],
            ['h = d.to("cpu")', "h = d.to(layer.device, non_blocking=True)",
             'h = d.to("cpu", non_blocking=False)']),
    *_cases("KVC008",
            ["self.device_id = torch.accelerator.current_device_index()", "torch.accelerator.set_device_index(0)",
             "i = torch.accelerator.current_device_idx()", "with torch.accelerator.device_index(1):\n    pass"],
            ["n = torch.accelerator.device_count()", "a = torch.accelerator.current_accelerator()",
             "i = kv_cache_layer.device.index", "i = other.accelerator.current_device_index()"]),
]


@pytest.mark.parametrize(("rule", "code", "expected"), CASES)
def test_rule_finds_its_pattern_only(rules_in, rule, code, expected):
    assert [r for r in rules_in(PREAMBLE + code) if r == rule] == expected


def test_every_rule_has_cases():
    covered = {case.values[0] for case in CASES} | {"KVC000"}  # KVC000 is covered below
    assert covered == set(RULES)


@pytest.mark.parametrize(("rule", "severity"), [
    ("KVC000", "error"), ("KVC001", "error"), ("KVC002", "error"), ("KVC003", "error"),
    ("KVC004", "error"), ("KVC005", "warning"), ("KVC006", "warning"), ("KVC007", "info"),
    ("KVC008", "error"),
])
def test_severities_are_the_documented_ones(rule, severity):
    assert RULES[rule].severity == severity


@pytest.mark.parametrize("code", [
    "from torch.cuda import Stream\ns = Stream()",
    "import torch as t\ns = t.cuda.current_stream()",
    "from torch import cuda\ncuda.synchronize()",
    "import torch.cuda as tc\ntc.synchronize()",
])
def test_imports_do_not_hide_torch_cuda_calls(rules_in, code):
    assert rules_in(code) == ["KVC004"]


def test_a_local_name_cuda_is_not_torch_cuda(rules_in):
    assert rules_in("cuda = make_backend()\ncuda.Stream()") == []


def test_from_import_of_torch_device_is_resolved(rules_in):
    assert rules_in('from torch import device\nd = device("cuda:0")') == ["KVC002"]


def test_device_in_torch_device_inside_to_is_one_finding(rules_in):
    assert rules_in('import torch\nx = y.to(torch.device("cuda"))') == ["KVC002"]


def test_findings_report_the_method_position_in_a_chain():
    source = b'kv = load_file(f)["kv_cache"].cuda()\n'
    [finding] = lint_source(source, Path("m.py"))
    assert (finding.line, finding.col) == (1, source.index(b".cuda") + 2)  # 1-based, at "cuda"


def test_columns_count_characters_not_bytes():
    line = 's = "é"; kv = x.to("cuda")'
    [finding] = lint_source(f"{line}\n".encode(), Path("m.py"))
    assert finding.col == line.index('"cuda"') + 1  # the byte offset would be one more


def test_findings_render_as_file_line_col_rule_severity_message_fix():
    [finding] = lint_source(b"import torch\nx = y.cuda()\n", Path("pkg/m.py"))
    assert finding.render() == (
        f"pkg/m.py:2:7: KVC001 error: {RULES['KVC001'].message.format(detail='.cuda()')} "
        f"(fix: {RULES['KVC001'].fix})")


def test_files_findings_are_sorted_by_file_then_position(tmp_path):
    (tmp_path / "b.py").write_text("import torch\nz = torch.cuda.Stream(); c = y.cuda()\nb = z.cuda()\n")
    (tmp_path / "a.py").write_text("x = y.to('cuda')\n")
    findings = lint_files([tmp_path / "b.py", tmp_path / "a.py"])
    assert [(Path(f.path).name, f.line, f.rule) for f in findings] == [
        ("a.py", 1, "KVC003"), ("b.py", 2, "KVC004"), ("b.py", 2, "KVC001"), ("b.py", 3, "KVC001")]


@pytest.mark.parametrize(("data", "line"), [
    (b"def load(:\n    pass\n", 1),
    (b"x = 1\nif True\n    y = 2\n", 2),
    (b"x = 1\x00\n", 1),
])
def test_unparseable_source_is_a_finding_not_a_traceback(data, line):
    [finding] = lint_source(data, Path("broken.py"))
    assert (finding.rule, finding.severity, finding.line) == ("KVC000", "error", line)
    assert "cannot check this file" in finding.message
