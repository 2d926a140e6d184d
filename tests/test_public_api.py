"""Every package's public API, pinned exactly: a name added or dropped is a decision made
here, not an accident. And no module reaches into another package's private modules."""

from __future__ import annotations

import importlib
import re
import types
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "populace"

API: dict[str, set[str]] = {
    "populace.agents": {
        "INTERNAL", "INTERVIEWER", "KINDS", "UNREADABLE", "Answer", "Choice", "Decision", "Event",
        "Memory", "Number", "Persona", "PersonaOptions", "Regex", "Schema", "Text",
        "persona_columns", "render_memory", "divergence", "sampling_report",
        "fallen_back", "falling_back", "fit_surrogates", "instruct", "SamplingCounts",
        "archetype_sizes"},
    # the command line: its entry point (pyproject's populace script) and the typer app
    "populace.cli": {"app", "main"},
    "populace.core": {
        "Agent", "AgentGroup", "AgentHandle", "Backend", "CallTimeout", "ConfigError",
        "LocalBackend", "Memory", "ModelBadResponse", "ModelError", "ModelHTTPError",
        "ModelTimeout", "ModelUnreachable", "Msg", "PerWorker", "Placeholder",
        "PlaceholderSet", "PopulaceError", "Profile", "RecordingMiss", "ServiceHandle",
        "ServiceLost",
        "SharedTimers", "Signal", "Simulation", "SimulationClosed", "SimulationStats",
        "TaskOwner", "UnobservedFailureWarning", "WorkerLost", "WorkerStats", "current_agent",
        "derive_seed", "gather", "make_backend", "mix64", "outcomes_table", "seed_for",
        "ship_by_value",
        "uniform_pick", "unit_float", "wait",
        # backends by name: the registry (issue 30)
        "LOCAL", "RAY", "BackendKind", "backend_kind", "backend_names", "expected_backends",
        "register_backend", "unregister_backend", "ray_host_port"},
    "populace.environment": {
        "ClientStats", "DuplicateKeyError", "Env", "EnvClient", "EnvError", "EnvEvent",
        "EnvServedError", "EnvService", "EnvStats", "EnvVerbs", "EventKind", "ListenerError",
        "Map2D", "MapStats", "Op", "OpKind", "RemoteEnvService", "Reply", "ServiceClosed",
        "ServiceStats", "Subscription", "TimeStep", "Timeline", "UnknownKeyError", "Watch",
        "serve"},
    "populace.llm": {
        "ChatMessage", "Completion", "DummyConfig", "DummyModel", "EndpointPool",
        "EndpointStats", "Lease", "ModelClient", "ModelConfig", "ModelSet", "ModelStats",
        "OpenAIConfig", "OpenAIModel", "RecordingModel", "ReplayModel", "ScriptedConfig",
        "SamplingConfig", "audits",
        "ScriptedModel", "ScriptedParams", "ServerOptions", "build_model", "create_app",
        "preflight", "request_key", "running_server", "scripted_reply", "serve", "TRAFFIC",
        "model_stats", "traffic", "run_batch", "BatchConfig", "Request", "Wrapper", "Retrying",
        "Counted", "ReplayThenLive", "OpenAIChat", "Transport", "AiohttpTransport",
        "MockTransport", "Response", "TransportError", "PythonConfig", "load_factory",
        "LAYOUTS", "Layout", "conversation", "Served", "EngineParams",
        "Coalescing", "limits", "read_agent_calls",
        # for the scripted model's rules, which live with their scenarios (issue 30)
        "scripted_rule", "text_of", "is_structured", "json_answer", "extracted_number",
        # what each server can do: the registry (issue 30)
        "ServerKind", "BusyProbe", "register_server_kind", "unregister_server_kind",
        "server_kind", "server_kind_names"},
    # the offline machinery (issue 30); populace.llm re-exports these names, as documented
    # there before
    "populace.llm.offline": {
        "DummyModel", "EngineParams", "ScriptedModel", "ScriptedParams", "ServerOptions",
        "create_app", "extracted_number", "is_structured", "json_answer", "run_batch",
        "running_server", "scripted_reply", "scripted_rule", "serve"},
    "populace.population": {
        "AspectConfig", "BackgroundConfig", "BackgroundResult", "DEFAULT_META_PROMPT",
        "DEFAULT_SYSTEM_PROMPT", "GroupsConfig", "PopulationConfig", "TEMPLATES",
        "diversity_report", "generate_backgrounds", "largest_remainder",
        "load_population_config", "sample_population",
        # the persona tables the scripted rules share (game, survey, background writer)
        "EDUCATION_STEPS", "PROFESSION_STEPS", "persona_steps"},
    "populace.launch": {
        "AllAnswersFailed", "COMMON_OPTIONS", "ConsoleObserver", "ENTRY_POINTS", "Estimate",
        "MAX_RECOVERIES", "Measure", "ModelEstimate", "Observer", "PILOT_AGENTS", "estimate",
        "ModelChoice",
        "Rows", "Run", "RunFile", "RunOptions", "STATUSES", "STOP_GRACE_S", "Scenario",
        "ScenarioFailed", "ScenarioSettings", "StepAbandoned", "StudioView", "Terminated",
        "as_numbers",
        "launch", "load_run_file", "parse_run_file", "ray_host_port", "resolve_scenario",
        "run_until_signalled", "scenario_of", "where",
        "INTERVENTIONS", "INTERVIEWER", "INTERVIEWS", "Intervention", "InterviewError",
        "RunControl",
        "RunNotLive", "SelectionError", "checkpointed_steps", "fork", "interview",
        "INPUTS", "check_inputs",
        "interview_run", "parse_intervention", "parse_sets", "read_interventions",
        "read_interviews", "reopen", "save_interview", "select", "where_filter",
        "written_profiles", "intervene", "Scheduled"},
    "populace.results": {
        "Breakdown", "CheckpointError", "Comparison", "Report", "RunData", "RunDirectory",
        "RunInUse", "RunMonitor", "RunSnapshot", "atomic_write", "checkpoint_files",
        "error_kind", "headline",
        "latest_checkpoint", "load_run", "panel_grid", "plain_categories", "read_agent_state",
        "read_checkpoint", "new_run_dir",
        "read_partial", "read_summary", "read_table", "run_snapshot", "sweep_table",
        "write_checkpoint", "write_comparison", "write_report"},
    "populace.scenarios.guess_number": {
        "DEFAULT_PROMPT", "GameConfig", "GroupScores", "Guess", "GuessNumber",
        "PROMPT_FIELDS", "Participant", "RESPONSE_SCHEMA", "Reporter", "RoundOutcome",
        "Rules", "SilentReporter", "Timings", "parse_number", "parse_ratio",
        "play", "score_groups", "score_round"},
    "populace.scenarios.social": {
        "ACTIONS", "Feeds", "Graph", "Item", "News", "Part", "Person", "ScriptedPolicy",
        "Shard", "Social", "StepData", "decide", "degree_stats", "homophily",
        "load_edge_list", "parse_action"},
    "populace.scenarios.survey": {
        "ANSWER_SCHEMA", "Arm", "Plan", "Question", "Questionnaire", "Respondent", "Survey",
        "SurveyConfig", "Treatments", "assign_arms", "compare_reference", "crosstab",
        "decode", "load_questionnaire", "marginals", "numeric_summary", "position_bias",
        "rake", "read_reference", "report_tables", "treatment_effects"},
    "populace.studio": {
        "AgentBrowser", "AgentQueryError", "LiveRun", "NotFound", "Refused", "Runs",
        "StudioServer", "UnknownAgent", "create_app", "is_loopback", "new_token"},
}


def public_names(module: types.ModuleType) -> set[str]:
    """Its public names, those it loads when first used (PEP 562) included."""
    return {name for name in dir(module)
            if not name.startswith("_") and not isinstance(getattr(module, name), types.ModuleType)}


@pytest.mark.parametrize("name", sorted(API))
def test_the_public_api_is_exactly_this(name: str) -> None:
    module = importlib.import_module(name)
    listed = list(module.__all__)
    assert len(listed) == len(set(listed)), "duplicates in __all__"
    assert set(listed) == API[name]
    assert public_names(module) == API[name]


@pytest.mark.parametrize("name", sorted(API))
def test_every_public_exception_is_a_populace_error(name: str) -> None:
    """The tree of core/_errors.py has one root: ``except PopulaceError`` sees them all."""
    from populace.core import PopulaceError

    module = importlib.import_module(name)
    errors = {n: v for n in module.__all__
              if isinstance(v := getattr(module, n), type) and issubclass(v, BaseException)
              and not issubclass(v, Warning)}
    assert {n for n, v in errors.items() if not issubclass(v, PopulaceError)} == set()


def test_the_exceptions_that_joined_the_tree() -> None:
    from populace.core import PopulaceError
    from populace.launch import StepAbandoned, Terminated
    from populace.llm import TransportError

    assert all(issubclass(e, PopulaceError) for e in (TransportError, Terminated, StepAbandoned))


def test_no_module_imports_another_packages_private_modules() -> None:
    private = re.compile(r"^\s*(?:from|import)\s+populace\.(\w+)((?:\.\w+)*)\._\w+", re.M)
    offenders = []
    for path in SRC.rglob("*.py"):
        package = path.relative_to(SRC).parts[0]
        for m in private.finditer(path.read_text()):
            if m.group(1) != package.removesuffix(".py"):
                offenders.append(f"{path.relative_to(SRC)}: {m.group(0).strip()}")
    assert offenders == []
