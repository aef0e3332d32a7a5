"""Small JUnit XML files written by hand, shaped like pytest's output for the conformance suite."""

# A cpu run whose JUnit carries kvconform's properties (what the plugin's results_json.py adds).
CPU_WITH_PROPERTIES = """<?xml version="1.0" encoding="utf-8"?>
<testsuites name="pytest tests">
 <testsuite name="pytest" errors="0" failures="2" skipped="1" tests="5" time="12.5"
            timestamp="2026-01-02T03:04:05+00:00" hostname="ci">
  <testcase classname="conformance.test_roundtrip"
            name="test_roundtrip[cpu-CPU_ATTN-ExampleConnector-float16-bs16]" time="1.5">
   <properties>
    <property name="kvconform.check" value="roundtrip"/>
    <property name="kvconform.platform" value="cpu"/>
    <property name="kvconform.backend" value="CPU_ATTN"/>
    <property name="kvconform.connector" value="ExampleConnector"/>
    <property name="kvconform.variant" value="float16-bs16"/>
    <property name="kvconform.params" value="{&quot;dtype&quot;: &quot;float16&quot;}"/>
   </properties>
  </testcase>
  <testcase classname="conformance.test_roundtrip"
            name="test_roundtrip[cpu-CPU_ATTN-ExampleConnector-aligned-extend]" time="2.0">
   <properties>
    <property name="kvconform.check" value="roundtrip"/>
    <property name="kvconform.platform" value="cpu"/>
    <property name="kvconform.backend" value="CPU_ATTN"/>
    <property name="kvconform.connector" value="ExampleConnector"/>
    <property name="kvconform.variant" value="aligned-extend"/>
    <property name="kvconform.expect" value="xfail"/>
    <property name="kvconform.expect.where" value="conformance/expectations/cpu.yaml:13"/>
    <property name="kvconform.expect.reason" value="loads from the wrong folder"/>
    <property name="kvconform.expect.link" value="https://github.com/vllm-project/vllm/issues"/>
    <property name="kvconform.expect.class" value="bug"/>
   </properties>
   <skipped type="pytest.xfail" message="loads from the wrong folder"/>
  </testcase>
  <testcase classname="conformance.test_engine" name="test_engine_generates[cpu-CPU_ATTN]" time="14.0">
   <properties>
    <property name="kvconform.check" value="engine"/>
    <property name="kvconform.connector" value="ExampleConnector"/>
    <property name="kvconform.platform" value="cpu"/>
   </properties>
   <failure message="AssertionError: second run computed 0 tokens from the connector">def test_engine
E   AssertionError: second run computed 0 tokens from the connector</failure>
  </testcase>
  <testcase classname="conformance.test_lint" name="test_lint[cpu-ExampleConnector]" time="0.3">
   <properties>
    <property name="kvconform.check" value="lint"/>
    <property name="kvconform.connector" value="ExampleConnector"/>
   </properties>
   <failure message="ExampleConnector: 1 lint error(s) in /v/example_connector.py:&#10;  example_connector.py:190: KVC001 error: .cuda() hard-codes the device&#10;  example_connector.py:200: KVC009 info: fine">ExampleConnector: 1 lint error(s) in /v/example_connector.py:
  example_connector.py:190: KVC001 error: .cuda() hard-codes the device</failure>
  </testcase>
  <testcase classname="conformance.test_contract.TestScheduler"
            name="test_claim[cpu-CPU_ATTN-DecodeBenchConnector]" time="0.1">
   <properties><property name="kvconform.check" value="contract"/></properties>
   <skipped type="pytest.skip" message="needs two devices">conformance/test_contract.py:40: needs two devices</skipped>
  </testcase>
 </testsuite>
</testsuites>
"""

# A cuda run from plain pytest (no properties): identity comes from the test ids alone.
CUDA_PLAIN = """<?xml version="1.0" encoding="utf-8"?>
<testsuite name="pytest" errors="1" failures="1" skipped="0" tests="5" time="30.0">
  <testcase classname="conformance.test_roundtrip"
            name="test_roundtrip[cuda-FLASH_ATTN-ExampleConnector-float16-bs16]" time="2.5"/>
  <testcase classname="conformance.test_roundtrip"
            name="test_roundtrip[cuda-FLASH_ATTN-NixlConnector-float16-bs16]" time="3.5">
    <failure message="RuntimeError: NIXL agent failed | &lt;b&gt;bold&lt;/b&gt;">Traceback
RuntimeError: NIXL agent failed</failure>
    <error message="failed on teardown with &quot;OSError: busy&quot;">OSError: busy</error>
  </testcase>
  <testcase classname="conformance.test_fill" name="test_fill[cuda-TRITON_ATTN-DecodeBenchConnector-tuple]"
            time="0.5">
    <error message="failed on setup with &quot;ValueError: no device&quot;">ValueError: no device</error>
  </testcase>
  <testcase classname="conformance.test_lint" name="test_lint[ExampleConnector]" time="0.2"/>
  <testcase classname="" name="conformance.test_broken" time="0.0">
    <error message="collection failure">ImportError: cannot import name 'gone'</error>
  </testcase>
</testsuite>
"""

HOSTILE_MESSAGE = "</pre></td><script>alert('pwned')</script><img src=x onerror=alert(1)>"

# A failure whose message and text try to break out of the page.
HOSTILE = f"""<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="1" failures="1">
  <testcase classname="conformance.test_roundtrip" name="test_roundtrip[cpu-CPU_ATTN-EvilConnector-x]" time="1">
    <failure message="{HOSTILE_MESSAGE.replace('<', '&lt;').replace('>', '&gt;').replace("'", '&apos;')}">{
        HOSTILE_MESSAGE.replace('<', '&lt;').replace('>', '&gt;')}</failure>
  </testcase>
</testsuite></testsuites>
"""
