"""Model configuration as it appears under ``models:`` in a run YAML."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from populace._strict import MAX_LATENCY_S, MAX_TIMEOUT_S, StrictModel, fail_at
from populace.core import ConfigError

from ._base import ModelClient
from ._openai import OpenAIModel
from ._sampling import SamplingConfig, sampling_field
from ._servers import ServerName
from ._wrappers import Counted
from .offline import DummyModel, ScriptedModel, ScriptedParams


class DummyConfig(StrictModel):
    """``provider: dummy`` — no server; waits ``latency`` s, answers a random integer."""

    provider: Literal["dummy"] = "dummy"
    latency: float = Field(1.0, ge=0, le=MAX_LATENCY_S, description="seconds each call waits "
                           "(at most 3600)")
    jitter: float = Field(0.0, ge=0, le=1, description="spread of the wait: each call waits "
                          "latency × (1 ± jitter), uniform and fixed by the call's seed")
    low: int = Field(0, description="smallest number answered")
    high: int = Field(100, description="largest number answered")
    sampling: SamplingConfig | None = sampling_field()

    @model_validator(mode="after")
    def _range(self) -> DummyConfig:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


class BatchConfig(StrictModel):
    """``batch:`` of an openai model: send a step's calls as batch jobs (see
    ``populace.llm._batch``): ``api`` (``/v1/files`` + ``/v1/batches``: half the price at
    OpenAI, hours of latency) or ``files`` (vLLM's offline ``run_batch``)."""

    mode: Literal["api", "files"] = "api"
    window: float = Field(1.0, gt=0, le=3600, description="seconds without a new call "
                          "before the calls waiting go out as one job")
    poll: float = Field(2.0, gt=0, le=3600, description="seconds between two looks at a job")
    max_requests: int = Field(50_000, ge=1, le=50_000, description="calls in one job, at "
                              "most (OpenAI takes 50,000)")
    completion_window: str = Field("24h", min_length=1)
    command: list[str] | None = Field(None, min_length=1, description="files mode: the "
                                      "command that turns {input} into {output} (default "
                                      "vLLM's run_batch with {model})")


class OpenAIConfig(StrictModel):
    """``provider: openai`` — any OpenAI-compatible server (vLLM, SGLang, Ollama, OpenAI).

    ```yaml
    models:
      qwen:
        provider: openai
        model: Qwen/Qwen2.5-7B-Instruct
        base_urls: [http://gpu1:8000/v1, http://gpu2:8000/v1]
        api_key_env: VLLM_API_KEY     # optional; the key itself never goes in the file
    ```
    """

    provider: Literal["openai"]
    model: str = Field(min_length=1, description="model name as the server knows it")
    base_urls: list[str] = Field(min_length=1, description="API roots, usually ending in /v1")
    api_key_env: str | None = Field(None, min_length=1,
                                    description="environment variable holding the API key")
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    timeout: float = Field(60.0, gt=0, le=MAX_TIMEOUT_S, description="seconds per attempt "
                           "(at most 86400)")
    max_retries: int = Field(4, ge=0, description="retries after the first attempt")
    max_concurrency: int = Field(64, ge=1, le=4096, description="requests in flight per "
                                 "endpoint and worker, at most (the ceiling of an adaptive "
                                 "limit)")
    min_concurrency: int = Field(1, ge=1, le=4096, description="the floor of an adaptive "
                                 "limit")
    adaptive: bool = Field(True, description="adapt each endpoint's limit: grow while the "
                           "server keeps up, halve on 429, 503 or a timeout")
    eject_after: int = Field(5, ge=1, description="consecutive failures that eject an endpoint")
    cooldown: float = Field(10.0, ge=0, le=MAX_TIMEOUT_S,
                            description="seconds an ejected endpoint rests")
    max_backoff: float = Field(8.0, ge=0, le=MAX_TIMEOUT_S, description="longest wait "
                               "between two attempts, seconds (the wait doubles from 0.25 s "
                               "after each failure)")
    retry_deadline: float | None = Field(
        None, gt=0, le=MAX_TIMEOUT_S, description="keep retrying a call until this many "
        "seconds after its first attempt (then max_retries is not used): rides out a server "
        "restart")
    price_per_million: tuple[float, float] | None = Field(
        None, description="[prompt, completion] price per million tokens: summaries then "
        "report the cost")
    batch: BatchConfig | None = Field(None, description="send the calls as batch jobs")
    coalesce: bool = Field(False, description="send identical calls made at the same "
                           "moment as one request for n answers (the server prefills the "
                           "prompt once; changes which sample each agent gets, not their "
                           "distribution)")
    server: ServerName = Field("auto", description="the kind of server, for its own "
                               "spelling of structured decoding: openai, vllm, sglang, "
                               "llamacpp, populace (serve-llm) or a registered kind; auto: "
                               "learnt by the preflight from the model list")
    slots: int | None = Field(None, ge=1, le=1_000_000, description="requests each server "
                              "computes at once (vLLM's max_num_seqs, llama.cpp's --parallel): "
                              "the workers' limits together stay within it; learnt from "
                              "llama.cpp's /props when unset")
    sampling: SamplingConfig | None = sampling_field()

    @field_validator("base_urls")
    @classmethod
    def _urls(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"base URL must start with http:// or https://, got {url!r}")
        cleaned = [u.rstrip("/") for u in urls]
        if len(set(cleaned)) != len(cleaned):
            raise ValueError("base URLs must be distinct")
        return cleaned

    @model_validator(mode="after")
    def _limits(self) -> OpenAIConfig:
        if self.min_concurrency > self.max_concurrency:
            fail_at(("min_concurrency",), f"expected at most max_concurrency "
                    f"({self.max_concurrency}), got {self.min_concurrency}")
        return self


class ScriptedConfig(StrictModel):
    """``provider: scripted`` — no server; answers by a documented rule of the prompt.

    Personas, prompt level, rules and earlier winners shape its numbers (the rules live with
    their scenarios; see docs/scripted-model.md), so offline runs show structure.

    ```yaml
    models:
      scripted: {provider: scripted}            # the rule as documented
      sharp: {provider: scripted, depth: 4}     # four more reasoning steps on every answer
    ```
    """

    provider: Literal["scripted"]
    latency: float = Field(0.0, ge=0, le=MAX_LATENCY_S, description="seconds each call waits "
                           "(at most 3600)")
    depth: float = Field(0.0, ge=-5, le=20, description="reasoning steps added to every answer")
    noise: float = Field(1.0, ge=0, description="multiplies the spread of the answers")
    invalid: float = Field(0.0, ge=0, le=1, description="share of answers that settle on no "
                           "number")
    primacy: float = Field(0.15, ge=0, le=1, description="share of single-choice survey "
                           "answers that take the first option shown")
    sampling: SamplingConfig | None = sampling_field()

    def params(self) -> ScriptedParams:
        return ScriptedParams(depth=self.depth, noise=self.noise, invalid=self.invalid,
                              primacy=self.primacy)


class PythonConfig(StrictModel):
    """``provider: python`` — a model client of your own (a local ``transformers``
    pipeline, another API): ``factory`` names a callable as ``path/to/file.py:name``
    (relative to the run file) or ``package.module:name`` (importable on every worker),
    called as ``factory(NAME, **options)`` once per worker; it returns a
    :class:`~populace.llm.ModelClient` (subclass it and implement ``send``).
    Such a model gets what the others get: recording, replay, retries if it raises
    retryable errors inside ``Retrying``, and the LLM traffic counters if it keeps any.

    ```yaml
    models:
      mine: {provider: python, factory: my_models.py:Echo}
      lab: {provider: python, factory: my_lab.models:make, options: {path: /data/w}}
    ```
    """

    provider: Literal["python"]
    factory: str = Field(pattern=r"^(?:[A-Za-z_][\w.]*|.+\.py):[A-Za-z_]\w*$",
                         description="file.py:callable or package.module:callable "
                         "returning a ModelClient")
    options: dict[str, Any] = Field(default_factory=dict,
                                    description="keyword arguments of the factory")
    sampling: SamplingConfig | None = sampling_field()


def _import(module_name: str) -> ModuleType:
    """A module by name, or by the path of its file (imported once per file)."""
    if not module_name.endswith(".py"):
        return importlib.import_module(module_name)
    path = Path(module_name).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no such file {path}")
    name = f"populace_models_{path.stem}"
    known = sys.modules.get(name)
    if known is not None and getattr(known, "__file__", None) == str(path):
        return known
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # pickling and dataclasses look modules up here
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_factory(ref: str) -> Any:
    """The callable ``ref`` names (``file.py:name`` or ``package.module:name``); raises
    :class:`~populace.core.ConfigError` saying why not, in one line."""
    module_name, _, attr = ref.rpartition(":")
    try:
        module = _import(module_name)
    except Exception as e:  # the user's module: one line saying why
        raise ConfigError(f"cannot import {module_name}: {type(e).__name__}: {e}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(f"{module_name} has no callable {attr!r}")
    return factory


def _from_factory(name: str, config: PythonConfig) -> ModelClient:
    where = f"models.{name}.factory {config.factory!r}"
    try:
        factory = load_factory(config.factory)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    try:
        client = factory(name, **config.options)
    except Exception as e:
        raise ConfigError(f"{where} failed: {type(e).__name__}: {e}") from None
    if not isinstance(client, ModelClient):
        raise ConfigError(f"{where} returned a {type(client).__name__}, not a ModelClient "
                          "(subclass populace.llm.ModelClient and implement send)")
    return client


ModelConfig = Annotated[DummyConfig | OpenAIConfig | ScriptedConfig | PythonConfig,
                        Field(discriminator="provider")]


def build_model(name: str,
                config: DummyConfig | OpenAIConfig | ScriptedConfig | PythonConfig, *,
                work_dir: Path | None = None, workers: int = 1) -> ModelClient:
    """A client for ``config``; called once per worker (see ``populace.core.PerWorker``).
    ``work_dir``: where batch jobs keep their files and journal (the run directory's
    ``llm_batches/``). ``workers``: how many workers build one, sharing a server's
    ``slots``.

    Raises :class:`~populace.core.ConfigError` when ``api_key_env`` names an unset variable.
    """
    if isinstance(config, DummyConfig):
        return DummyModel(name, latency=config.latency, jitter=config.jitter, low=config.low,
                          high=config.high)
    if isinstance(config, ScriptedConfig):
        return ScriptedModel(name, latency=config.latency, params=config.params())
    if isinstance(config, PythonConfig):
        return _from_factory(name, config)
    if isinstance(config, OpenAIConfig):
        api_key = None
        if config.api_key_env is not None:
            api_key = os.environ.get(config.api_key_env)
            if not api_key:
                raise ConfigError(
                    f"model {name!r}: environment variable {config.api_key_env} "
                    "(api_key_env) is not set or empty"
                )
        chat = OpenAIModel(
            name,
            model=config.model,
            base_urls=config.base_urls,
            api_key=api_key,
            timeout=config.timeout,
            max_retries=config.max_retries,
            max_concurrency=config.max_concurrency,
            min_concurrency=config.min_concurrency,
            adaptive=config.adaptive,
            temperature=config.temperature,
            top_p=config.top_p,
            max_tokens=config.max_tokens,
            eject_after=config.eject_after,
            cooldown=config.cooldown,
            max_backoff=config.max_backoff,
            retry_deadline=config.retry_deadline,
            server=config.server,
            coalesce=config.coalesce and config.batch is None,
        )
        if config.slots is not None:  # this worker's share of every server's slots
            for url in config.base_urls:
                chat.chat.pool.set_capacity(url, max(1, config.slots // max(1, workers)))
        if config.batch is None:
            return chat
        from ._batch import VLLM_RUN_BATCH, BatchModel

        b = config.batch
        return Counted(BatchModel(chat, config.base_urls[0], api_key=api_key, mode=b.mode,
                          window=b.window, poll=b.poll, max_requests=b.max_requests,
                          completion_window=b.completion_window,
                          command=b.command or VLLM_RUN_BATCH, work_dir=work_dir))
    raise TypeError(f"unknown model config {type(config).__name__}")
