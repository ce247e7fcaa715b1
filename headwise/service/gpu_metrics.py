"""`headwise_gpu_*` gauges read from NVML (the nvidia-ml-py package) at each scrape, one series
per device, when a driver is there: utilisation, memory used and memory total. Without
nvidia-ml-py or a driver there is no collector and no series (docs/metrics.md)."""

from __future__ import annotations

import logging

from prometheus_client.core import GaugeMetricFamily

log = logging.getLogger("headwise.service")


class GpuCollector:
    """A prometheus-client collector over an initialised `pynvml` module."""

    def __init__(self, nvml):
        self.nvml = nvml
        self.devices = [(str(i), nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(nvml.nvmlDeviceGetCount())]

    def describe(self):
        return list(self._families())

    def _families(self):
        labels = ["device"]
        return (GaugeMetricFamily("headwise_gpu_utilization_ratio", "share of the last sample period in which a "
                                  "kernel ran on the GPU (NVML), 0 to 1", labels=labels),
                GaugeMetricFamily("headwise_gpu_memory_used_bytes", "GPU memory in use, every process (NVML)",
                                  labels=labels),
                GaugeMetricFamily("headwise_gpu_memory_total_bytes", "GPU memory installed (NVML)", labels=labels))

    def collect(self):
        util, used, total = self._families()
        for index, handle in self.devices:
            try:
                rates = self.nvml.nvmlDeviceGetUtilizationRates(handle)
                memory = self.nvml.nvmlDeviceGetMemoryInfo(handle)
            except self.nvml.NVMLError as e:  # a device gone bad answers nothing, the rest still do
                log.debug("NVML device %s: %s", index, e)
                continue
            util.add_metric([index], rates.gpu / 100.0)
            used.add_metric([index], float(memory.used))
            total.add_metric([index], float(memory.total))
        return [util, used, total]


def gpu_collector() -> GpuCollector | None:
    """The collector when NVML answers here, else None (no GPU, no driver, no nvidia-ml-py)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        collector = GpuCollector(pynvml)
    except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: no GPU metrics here
        log.debug("no GPU metrics: %s", e)
        return None
    return collector if collector.devices else None
