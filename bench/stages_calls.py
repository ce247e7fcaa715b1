"""The service's request path made callable one stage at a time, for bench.stages: stand-ins
for the backend (record the runs, answer them again at once), for the engine as the route sees
it (answer at once) and for the route's `responses.answer` (keep its writer's bound and
build), and the parts of tokenising, batching, copying out and serialising, each as a call of
its own."""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from functools import partial

import numpy as np
import orjson


class StageGone(RuntimeError):
    """A function bench.stages times is no longer where it was (the service was refactored)."""


def need(obj, name: str):
    """`obj.name`, or StageGone saying what is missing and where to look."""
    try:
        return getattr(obj, name)
    except AttributeError:
        owner = getattr(obj, "__name__", type(obj).__qualname__)
        raise StageGone(f"bench.stages times {owner}.{name}, which is gone: update bench/stages.py "
                        "(bench/stages_calls.py) to the request path as it is now") from None


def batch_feeds(rt):
    """A batch's feeds for `rt`, as `feeds(entries, padded)`: service.engine.feeds.batch_feeds
    (EncoderRuntime.feeds in trees before 2026-11-29)."""
    if hasattr(rt, "feeds"):
        return rt.feeds
    from headwise.service.engine import feeds

    return partial(need(feeds, "batch_feeds"), rt.package)


@contextmanager
def swapped(obj, **attrs):
    """`obj`'s attributes set to `attrs` for the block (an instance's attribute shadows its
    class's method), then as they were."""
    saved = {k: vars(obj)[k] for k in attrs if k in vars(obj)}
    for k, v in attrs.items():
        setattr(obj, k, v)
    try:
        yield obj
    finally:
        for k in attrs:
            if k in saved:
                setattr(obj, k, saved[k])
            else:
                delattr(obj, k)


# -- the backend -------------------------------------------------------------------------------
class Recorder:
    """A backend that runs `backend` and keeps every run: (role, feeds, outputs, answer)."""

    def __init__(self, backend):
        self.backend, self.runs = backend, []

    def __getattr__(self, name: str):
        return getattr(self.backend, name)

    def run(self, role: str, feeds: dict, outputs: list[str]) -> dict:
        answer = self.backend.run(role, feeds, outputs)
        self.runs.append((role, feeds, list(outputs), answer))
        return answer


class Replay(Recorder):
    """A backend that answers a Recorder's runs again, in turn, at once."""

    def __init__(self, recorder: Recorder):
        super().__init__(recorder.backend)
        self.runs = recorder.runs
        self._turns = itertools.cycle(recorder.runs)

    def run(self, role: str, feeds: dict, outputs: list[str]) -> dict:
        return next(self._turns)[3]


def copy_out(backend, runs: list):
    """onnxruntime only: the recorded runs again with IOBinding, outputs left where the graph
    made them → the call copying them all out to numpy (what session.run's answer costs beyond
    the run itself), or None for another backend."""
    session = getattr(backend, "session", None)
    if session is None:
        return None
    device = getattr(backend, "binding", None) or "cpu"
    copies = []
    for role, feeds, outputs, _ in runs:
        binding = session(role).io_binding()
        for name in need(backend, "input_names")(role):
            binding.bind_cpu_input(name, feeds[name])
        for name in outputs:
            binding.bind_output(name, device, backend.settings.device_id if device == "cuda" else 0)
        session(role).run_with_iobinding(binding)
        copies.append(binding.copy_outputs_to_cpu)
    return lambda: [c() for c in copies]


# -- the engine's side -------------------------------------------------------------------------
def tokenizer_parts(package, texts: list[str]) -> dict:
    """What TextTokenizer.encode_unchecked's answer is made of, each on its own: the Rust
    encode_batch, the ids as int64 arrays, the per-token strings and offsets as Python lists
    (tokenizers builds a new list at every getter call), its prefix check's token count, and
    encode_batch_fast (no offsets) for comparison."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(package.tokenizer_file))  # as TextTokenizer's truncating one
    tok.no_padding()
    tok.enable_truncation(max_length=package.max_len)
    encs = tok.encode_batch(texts)
    parts = {
        "encode_batch (tokenizers, Rust)": lambda: tok.encode_batch(texts, add_special_tokens=True),
        "ids, type_ids → int64 arrays": lambda: [(np.asarray(e.ids, np.int64), np.asarray(e.type_ids, np.int64))
                                                 for e in encs],
        "tokens, offsets → Python lists (Encoded.tokens, .offsets)": lambda: [(e.tokens, e.offsets) for e in encs],
        "prefix check's count: len(e.ids) + e.overflowing": lambda: [
            len(e.ids) + sum(len(o.ids) for o in e.overflowing) for e in encs],
    }
    if hasattr(tok, "encode_batch_fast"):
        parts["encode_batch_fast: no offsets (for comparison)"] = lambda: tok.encode_batch_fast(texts)
    return parts


def batching(rt, role: str, job, entries):
    """A call doing what the batcher does with one job's entries, in a Batcher of its own built
    as the runtime builds its own: run them in the hop that tokenised them when they fit one
    batch (plan), else queue them and cut batches → [(entries, padded)]. On the running loop."""
    from headwise.service.engine.batching import Batcher, Work

    served = need(rt, "batchers")[role]
    scratch = Batcher(rt.limits(role), rt.buckets, pad_to_bucket=served.pad_to_bucket)

    def batch() -> list:
        plan = scratch.plan(Work([job], [], run=True), [entries])
        if plan is not None:
            return [plan]
        scratch.submit(job, entries)
        return list(iter(scratch.cut, ([], 0)))

    return batch


def in_order(batches: list, answers: list, n: int) -> list:
    """Per input, in the request's order, its answer among the batches' answers."""
    data = [None] * n
    for (entries, _), answer in zip(batches, answers, strict=True):
        for e, embedded in zip(entries, answer, strict=True):
            data[e.index] = embedded
    return data


# -- the route's side --------------------------------------------------------------------------
class Asked(Exception):
    """Raised by Answering.embed when it has no result yet: what the route asked is kept."""


class Answering:
    """The engine as the route sees it, whose `embed` runs the engine's own checks
    (Engine.check_inputs) and answers `result` at once; without one, it keeps what it was asked and
    stops the route there (Asked)."""

    def __init__(self, engine):
        self._engine, self.result, self.asked = engine, None, None

    def __getattr__(self, name: str):
        return getattr(self._engine, name)

    async def embed(self, rt, inputs, params, is_disconnected=None):
        need(self._engine, "check_inputs")(inputs)
        if self.result is None:
            self.asked = (inputs, params)
            raise Asked
        return self.result


def post_route(app, path: str):
    """The APIRoute of POST `path`."""
    from fastapi.routing import APIRoute

    from headwise.service.api import app as app_module

    routes = [r for r in need(app_module, "api_routes")(app.router.routes)
              if isinstance(r, APIRoute) and r.path == path and "POST" in r.methods]
    if not routes:
        raise StageGone(f"no POST {path} route in the app")
    return routes[0]


def body_parser(app, path: str):
    """The dependency that parses POST `path`'s body (the route's `body: Json[Model]`)."""
    from headwise.service.api import body

    parsers = [d.call for d in post_route(app, path).dependant.dependencies
               if need(body, "body_model")(d.call) is not None]
    if not parsers:
        raise StageGone(f"POST {path} has no json_body dependency")
    return parsers[0]


def route_call(app, path: str, values: dict):
    """The endpoint of POST `path`, its dependencies' values given by their callables
    (`values`; those answering nothing, as the API key check, left out): request → awaitable."""
    route, kwargs = post_route(app, path), {}
    for sub in route.dependant.dependencies:
        if sub.name is None:
            continue
        if sub.call not in values:
            raise StageGone(f"POST {path} now depends on {sub.call.__qualname__}: give bench.stages its value")
        kwargs[sub.name] = values[sub.call]
    return lambda request: route.endpoint(**{route.dependant.request_param_name: request}, **kwargs)


class Captured:
    """Stands for the router's `answer`: keeps the (budget, size, build) its writer gives and
    answers an empty response at once, so that the route's own work is timed without its JSON."""

    def __init__(self):
        from starlette.responses import Response

        self.args, self._response = None, Response(b"")

    def __call__(self, engine, writer, result, request=None, **kw):
        self.args = (engine.responses, writer.bound(result, request), lambda: writer.build(result, request))
        return self._ready()

    async def _ready(self):
        return self._response


def serialise_parts(build) -> dict:
    """What responses.budgeted_json does, each on its own: the route's payload dict, then its JSON as one
    orjson call (an answer bounded at 64 KiB or less) or as serialize.dumps_chunks writes it (a
    larger one, on a worker thread: a walk of the payload for arrays over 64 KiB, then orjson)."""
    from headwise.service.api import responses, serialize

    payload, option, chunks = build(), need(responses, "DUMPS"), need(serialize, "dumps_chunks")
    return {"build(): the route's payload dict": build,
            "orjson.dumps(payload), one call: a bound ≤ 64 KiB": lambda: orjson.dumps(payload, option=option),
            "serialize.dumps_chunks(payload): a bound > 64 KiB (on a thread)": lambda: chunks(payload)}
