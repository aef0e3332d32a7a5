"""index.html as a person sees it: rendered by a real headless browser (Debian's chromium).

A probe script appended to a copy of the page opens the first failure the way a
reader would and records what the browser laid out: that the error comes before
the folded traceback, that the traceback is folded, that the outcome marks have
a size (they are text, not glyphs from an emoji font the machine may lack) and
that the filters' script ran without an error. ``--dump-dom`` hands the record
back; a screenshot proves the page paints.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess

import pytest

from kvconform.conformance.cli import main
from tests.reports.samples import CPU_WITH_PROPERTIES, CUDA_PLAIN

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install -y "
                                                          "chromium), so the page's rendering cannot be checked")
# Flags for a sandboxed CI container: no GPU, no network side traffic, a fresh profile per run.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
BROWSER_TIMEOUT_S = 120

PROBE = """
<script>
(function () {
  var record = {errors: []};
  window.addEventListener('error', function (e) { record.errors.push(String(e.message)); });
  try {
    var item = document.querySelector('#failures li pre.error').closest('li');
    var error = item.querySelector('pre.error'), trace = item.querySelector('details.trace');
    record.errorText = error.innerText;
    record.errorTop = error.getBoundingClientRect().top;
    record.traceTop = trace.getBoundingClientRect().top;
    record.traceOpen = trace.open;
    record.tracebackVisible = trace.querySelector('pre').checkVisibility();
    record.errorVisible = error.checkVisibility();
    record.markWidths = Array.prototype.map.call(document.querySelectorAll('.badge'),
                                                 function (b) { return b.getBoundingClientRect().width; });
    record.text = document.body.innerText;
    var select = document.getElementById('f-outcome');
    select.value = 'failed';
    select.dispatchEvent(new Event('change'));
    record.rowsShownForFailed = Array.prototype.filter.call(
      document.querySelectorAll('#matrix tbody tr'), function (r) { return !r.hidden; }).length;
  } catch (e) { record.errors.push(String(e)); }
  document.body.setAttribute('data-probe', JSON.stringify(record));
})();
</script>
"""


def _browse(tmp_path, page, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
                          capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S)


@pytest.fixture
def page(tmp_path, capsys):
    inputs = []
    for name, text in (("cpu.xml", CPU_WITH_PROPERTIES), ("cuda.xml", CUDA_PLAIN)):
        inputs.append(tmp_path / name)
        inputs[-1].write_text(text)
    main(["report", *map(str, inputs), "--out", str(tmp_path / "out")])
    capsys.readouterr()
    return tmp_path / "out" / "index.html"


def test_the_browser_shows_the_error_first_with_marks_that_need_no_emoji_font(tmp_path, page):
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    done = _browse(tmp_path, probed, "--dump-dom")
    found = re.search(r'data-probe="([^"]*)"', done.stdout)
    assert found, f"chromium exited {done.returncode} without running the page: {done.stderr[-2000:]}"
    record = json.loads(html.unescape(found.group(1)))
    assert record["errors"] == []
    assert record["rowsShownForFailed"] == 2  # the outcome filter ran: NixlConnector (cuda), ExampleConnector (cpu)
    assert record["errorText"] == "ImportError: cannot import name 'gone'"  # the first failure: a collection error
    assert record["errorVisible"] and record["errorTop"] < record["traceTop"], "the error comes before the traceback"
    assert record["traceOpen"] is False and record["tracebackVisible"] is False, "the traceback starts folded"
    assert record["markWidths"] and min(record["markWidths"]) > 10, "every outcome mark is drawn as text"
    odd = sorted({ch for ch in record["text"] if ord(ch) > 0x2000 and ch not in "–…·"})
    assert odd == [], f"characters that need more than DejaVu's fonts: {odd}"
    for mark in ("FAIL", "ERROR", "XFAIL", "PASS", "SKIP"):
        assert mark in record["text"]


def test_the_page_paints(tmp_path, page):
    shot = tmp_path / "page.png"
    done = _browse(tmp_path, page, "--window-size=1280,1600", f"--screenshot={shot}")
    assert shot.exists(), f"chromium exited {done.returncode} without a screenshot: {done.stderr[-2000:]}"
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a blank 1280x1600 page compresses to ~6 KB
