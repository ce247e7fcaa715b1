"""headwise_gpu_* gauges from NVML, read at each scrape (a fake NVML here: no GPU in CI)."""

from prometheus_client import generate_latest

from headwise.service.gpu_metrics import GpuCollector, gpu_collector
from headwise.service.metrics import Metrics
from tests.unit.fakes import FakeNvml


def scrape(metrics: Metrics) -> dict[str, float]:
    out = {}
    for line in generate_latest(metrics.registry).decode().splitlines():
        if line.startswith("headwise_gpu_"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_one_series_per_device_with_ratio_and_bytes():
    got = scrape(Metrics(gpu=GpuCollector(FakeNvml())))
    assert got['headwise_gpu_utilization_ratio{device="0"}'] == 0.40
    assert got['headwise_gpu_utilization_ratio{device="1"}'] == 0.41
    assert got['headwise_gpu_memory_used_bytes{device="1"}'] == 2 << 30
    assert got['headwise_gpu_memory_total_bytes{device="0"}'] == 80 << 30


def test_a_device_that_fails_is_left_out_and_the_scrape_still_answers():
    got = scrape(Metrics(gpu=GpuCollector(FakeNvml(broken=True))))
    assert 'headwise_gpu_utilization_ratio{device="0"}' in got
    assert not any('device="1"' in k for k in got)


def test_no_nvml_no_series():
    assert gpu_collector() is None  # no driver on the CI machine (or no nvidia-ml-py)
    assert scrape(Metrics()) == {}
