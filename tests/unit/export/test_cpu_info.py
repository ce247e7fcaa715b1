"""headwise/export/cpu.py: every speed figure names the CPU that measured it, with its relevant flags."""

from headwise.export import cpu

EPYC = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13 64-Core Processor
flags\t\t: fpu sse sse2 avx fma avx2 bmi2
processor\t: 1
model name\t: AMD EPYC 7B13 64-Core Processor
flags\t\t: fpu sse sse2 avx fma avx2 bmi2
"""
XEON = """model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: avx2 fma avx512f avx512bw avx512_vnni avx_vnni amx_tile amx_int8 amx_bf16 avx512_bf16
"""


def test_an_avx2_only_epyc_is_told_apart_from_a_vnni_xeon(tmp_path):
    (tmp_path / "epyc").write_text(EPYC)
    (tmp_path / "xeon").write_text(XEON)
    epyc, xeon = cpu.describe(tmp_path / "epyc"), cpu.describe(tmp_path / "xeon")
    assert epyc == {"model": "AMD EPYC 7B13 64-Core Processor", "flags": ["avx2", "fma"]}
    assert xeon["flags"] == ["avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16"]
    assert cpu.label(epyc) == "AMD EPYC 7B13 64-Core Processor (avx2 fma)"


def test_no_cpuinfo_still_gives_a_label(tmp_path):
    info = cpu.describe(tmp_path / "missing")
    assert info["flags"] == [] and cpu.label(info).endswith("(no avx2)")


def test_bench_facts_name_the_cpu_and_its_flags():
    from bench.facts import machine_facts

    assert machine_facts("cpu")["cpu"] == cpu.label()
