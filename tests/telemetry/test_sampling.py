"""Invariant 3: sampling never disables durability, and exporters never see dropped spans."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, Sampler, TraceIdRatioBased

import spanpoint
from spanpoint import semconv
from spanpoint.config import reset_for_tests
from spanpoint.processor import DurableSampler
from spanpoint.stores import MemoryStore
from tests.conftest import make_telemetry


@pytest.mark.parametrize(
    "sampler", [ALWAYS_OFF, ParentBased(TraceIdRatioBased(0))], ids=["always_off", "parent_ratio_0"]
)
def test_replay_works_with_every_span_sampled_out(sampler: Sampler) -> None:
    telemetry = make_telemetry(MemoryStore(), sampler=sampler)
    executed: list[int] = []

    @spanpoint.step
    def work(x: int) -> int:
        executed.append(x)
        with trace.get_tracer("user").start_as_current_span("user span inside a step"):
            pass
        return x * 2

    for _ in range(2):
        with spanpoint.run("sampled-out"):
            assert work(4) == 8
    assert executed == [4]
    assert len(telemetry.store.list_checkpoints("sampled-out")) == 1
    assert telemetry.exporter.get_finished_spans() == ()
    assert isinstance(telemetry.provider.sampler, DurableSampler)
    reset_for_tests()


def test_durable_sampler_only_upgrades_spanpoint_spans() -> None:
    sampler = DurableSampler(ALWAYS_OFF)
    plain = sampler.should_sample(None, 1, "http GET", attributes={"http.method": "GET"})
    boundary = sampler.should_sample(None, 1, "step", attributes={semconv.BOUNDARY_KIND: "step"})
    run = sampler.should_sample(None, 1, "spanpoint.run", attributes={semconv.RUN_ID: "r"})
    assert not plain.decision.is_recording()
    assert boundary.decision.is_recording() and not boundary.decision.is_sampled()
    assert run.decision.is_recording() and not run.decision.is_sampled()
    assert sampler.get_description() == "DurableSampler{AlwaysOffSampler}"


def test_durability_holds_without_an_sdk_provider() -> None:
    spanpoint.configure(tracer_provider=trace.NoOpTracerProvider(), store=MemoryStore())
    executed: list[int] = []

    @spanpoint.step
    def work() -> int:
        executed.append(1)
        return 7

    for _ in range(2):
        with spanpoint.run("noop"):
            assert work() == 7
    assert executed == [1]
    reset_for_tests()
