"""Argument parsing and dispatch for whatever jobs and commands a registry holds.

``batchenum run JOB [job options] [--out DIR] [--workers K] [--address A] [--serial]`` runs a job:
a registered name (pipeline/registry.py), ``MODULE:CLASS`` or ``path/to/file.py:CLASS``.  A job's
options come from its declared parameters (pipeline/params.py): ``max_n`` is ``--max-n``.  Other
commands (``generate dungeons``, ``table``, ...) are supplied by the jobs package.
Exit status: 0 when the job ran (whatever records it rejected), 1 on an error that stopped it,
2 on bad usage, 130 when interrupted.  ``--json`` makes ``run`` and ``status`` print one JSON
document on standard output (docs/cli.md, "JSON output"); progress stays on standard error.
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import os
import re
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from batchenum.pipeline.batch import BatchInputJob, rejection_lines
from batchenum.pipeline.batch_writer import write_batch
from batchenum.pipeline.codeversion import installed_part
from batchenum.pipeline.errors import PipelineError, UsageError
from batchenum.pipeline.execute import expected_work, run_job
from batchenum.pipeline.interrupts import interrupted as _interrupted
from batchenum.pipeline.job import Job, PlanContext
from batchenum.pipeline.names import check_file_name
from batchenum.pipeline.params import (
    INPUTS,
    REQUIRED,
    Param,
    ParamError,
    SpokenError,
    declared_params,
    resolve_params,
    spelled,
)
from batchenum.pipeline.progress import Progress
from batchenum.pipeline.registry import JobRegistry, PluginWarning, is_job_path
from batchenum.pipeline.run_options import CLI, RunOptions, run_params
from batchenum.pipeline.storage import Storage, is_uri

__all__ = [
    "Command",
    "main",
    "parse_job",
    "build_parser",
    "add_param_options",
    "ParamCommand",
    "positive_int",
    "write_generated",
]


@dataclass(frozen=True)
class Command:
    """Any other command, at a path such as ("generate", "dungeons") or ("table",)."""

    path: tuple[str, ...]
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    return _int_at_least(text, 1)


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be at least {low}, not {value}")
    return value


def _add_runs_folder(parser: argparse.ArgumentParser) -> None:
    """--out for the commands that read what runs wrote (status, cleanup)."""
    parser.add_argument(
        "--out", default="results", metavar="DIR", help="the folder or URI the runs write to (default: results)"
    )


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    """The run's own options, from their declaration (pipeline/run_options.py): a flag for a yes/no
    option (``--serial``; ``--no-head-start`` for one that is on by default)."""
    group = parser.add_argument_group("where and how to run")
    for name, param in run_params(CLI).items():
        options: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS, "help": _run_option_help(param)}
        if param.type is bool:
            options["action"] = "store_false" if param.default else "store_true"
            group.add_argument(spelled(f"no_{name}" if param.default else name, cli=True), **options)
        else:
            group.add_argument(spelled(name, cli=True), metavar=param.metavar, **options)


def _run_option_help(param: Param) -> str:
    if param.type is bool or param.default is None or "(default" in param.help:
        return param.help
    return f"{param.help} (default: {param.default:g})" if isinstance(param.default, float) else param.help


class ParamCommand:
    """A command whose options are declared as ``Param``s, as a job's parameters are: from them come
    its options, their ``--help`` lines, the checks and their messages.  A subclass sets ``path``
    and ``help`` and writes ``run``; ``ParamCommand(**values)`` checks the values and sets them."""

    path: tuple[str, ...] = ()
    help: str = ""

    def __init__(self, **values: Any):
        for name, value in resolve_params(type(self), (), values, type(self).check_params).items():
            setattr(self, name, value)

    @classmethod
    def check_params(cls, values: dict[str, Any]) -> None:
        """Rules between options, or for one option beyond its bounds: raise ParamError."""

    def run(self) -> int:
        """Do the command; return the exit status."""
        raise NotImplementedError

    @classmethod
    def command(cls) -> Command:
        return Command(cls.path, cls.help, lambda parser: add_param_options(parser, cls), cls._run_from)

    @classmethod
    def _run_from(cls, args: argparse.Namespace) -> int:
        try:
            command = cls(**{name: getattr(args, name) for name in declared_params(cls) if hasattr(args, name)})
        except ParamError as error:
            raise error.spoken(cli=True) from None
        return command.run()


def add_param_options(parser: argparse.ArgumentParser, job_class: type) -> None:
    """One option per declared parameter: ``--max-n N``, its help with its default.  Values are
    checked by the job (``Job.create``) or command, so the command line and Python get the same
    messages."""
    for name, param in declared_params(job_class).items():
        options: dict[str, Any] = {
            "dest": name,
            "default": argparse.SUPPRESS,
            "help": _param_help(param, job_class),
            "metavar": param.metavar or name.upper().replace("_", "-"),
        }
        if param.required:
            options["required"] = True
        if param.type is INPUTS:
            options.update(nargs="+", action="extend")
        elif param.type is bool:
            options = {k: v for k, v in options.items() if k != "metavar"}
            options["action"] = argparse.BooleanOptionalAction
        elif param.choices:
            options["metavar"] = "{" + ",".join(map(str, param.choices)) + "}"
        parser.add_argument(spelled(name, cli=True), **options)


def _param_help(param: Param, job_class: type) -> str:
    text = param.help_for(job_class)
    if param.default is REQUIRED or param.default is None or "(default" in text:
        return text
    shown = f"{param.default:g}" if isinstance(param.default, float) else param.default
    return f"{text} (default: {shown})"


def job_help(job_class: type[Job]) -> str:
    """The job's one-line description: the first line of its docstring."""
    return (job_class.__doc__ or job_class.name).strip().splitlines()[0].rstrip(".")


def build_parser(
    registry: JobRegistry, prog: str, version: str = "unknown", only_job: str = ""
) -> argparse.ArgumentParser:
    """The whole command line: ``run`` with a sub-command per registered job, status, cleanup, and
    the registry's other commands.

    only_job: build ``run`` with that job alone (a registered name, or ``MODULE:CLASS``) and no other
    command, for a command line that starts ``run JOB``: argparse reads it the same, without
    importing every job's module."""
    parser = _Parser(prog=prog, description="Distributed batch enumeration on Ray.")
    parser.add_argument("--version", action="version", version=f"{prog} {version}")
    top = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    run = top.add_parser(
        "run",
        help="run a job",
        description="Run a job and write its tables: a job's name, or "
        "MODULE:CLASS, or path/to/file.py:CLASS for a job class of your own (docs/jobs.md).",
    )
    run_jobs = run.add_subparsers(dest="job", metavar="JOB", required=True)
    for name in [only_job] if only_job else registry.names():
        job_class = registry.job_class(name)
        sub = run_jobs.add_parser(name, help=job_help(job_class), description=job_help(job_class))
        add_param_options(sub, job_class)
        _add_run_options(sub)
        sub.set_defaults(handler=lambda args, job_class=job_class: _run(job_class, args, prog))
    status = top.add_parser(
        "status",
        help="what each job folder under DIR holds (works during a run)",
        description="For every job found under DIR: shards committed out of planned, "
        "stale or damaged ones, parameters, code version, the last commit and "
        "an estimate of the time left, and the final tables with their provenance.",
    )
    _add_runs_folder(status)
    status.add_argument("--json", action="store_true", help="one JSON object on standard output (docs/cli.md)")
    status.set_defaults(handler=lambda args: _status(args, registry))
    cleanup = top.add_parser(
        "cleanup",
        help="remove the shard files that committed tables no longer need",
        description="For every job folder under DIR (or --job's) whose tables are committed: "
        "delete the shard store (_shards/), after completing an interrupted commit. "
        "A rerun then computes every shard again. Folders without committed tables "
        "keep their shards. Without --job, also delete the inputs batchenum.run wrote to "
        "DIR/_inputs/ (DataFrames) that no job's tables or plan name, but those of the last hour.",
    )
    _add_runs_folder(cleanup)
    cleanup.add_argument("--job", metavar="NAME", help="only this job's folder")
    cleanup.set_defaults(handler=_cleanup)
    groups: dict[tuple[str, ...], argparse._SubParsersAction] = {(): top}
    for command in [] if only_job else registry.commands():
        actions = groups[()]
        for depth in range(1, len(command.path)):
            key = command.path[:depth]
            if key not in groups:
                group_parser = actions.add_parser(key[-1], help=f"{key[-1]} commands")
                groups[key] = group_parser.add_subparsers(dest="_".join(key), metavar="WHAT", required=True)
            actions = groups[key]
        sub = actions.add_parser(command.path[-1], help=command.help, description=command.help)
        command.add_arguments(sub)
        sub.set_defaults(handler=command.run)
    return parser


_INVALID_CHOICE = re.compile(
    r"argument (?P<argument>\S+): invalid choice: (?P<given>'.*?') \(choose from (?P<choices>.*)\)$"
)


class _Parser(argparse.ArgumentParser):
    """argparse, with its mistakes answered by the command they were made in: an unknown option
    gets that command's usage (``run palago --max-m``: palago's, not the top level's) and the
    closest option; an unknown choice the closest choice; an unknown job how to name one's own."""

    def parse_args(self, args=None, namespace=None):
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            words = list(sys.argv[1:] if args is None else args)
            owner = _command_parser(self, words)
            owner.error(f"unrecognized arguments: {' '.join(extras)}{_did_you_mean(extras, _options_of(owner))}")
        return parsed

    def error(self, message: str) -> NoReturn:
        found = _INVALID_CHOICE.match(message)
        if found:
            choices = [choice.strip("'") for choice in found["choices"].split(", ")]
            message += _did_you_mean([found["given"].strip("'")], choices)
            if found["argument"] == "JOB":
                message += "; or a job class of your own, as MODULE:CLASS or path/to/file.py:CLASS (docs/jobs.md)"
        super().error(message)


def _command_parser(parser: argparse.ArgumentParser, words: Sequence[str]) -> argparse.ArgumentParser:
    """The parser of the (sub-)command a command line names: ``run palago ...`` -> palago's."""
    for word in words:
        commands = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
        if not commands:
            break
        parser = commands[0].choices.get(word, parser)
    return parser


def _options_of(parser: argparse.ArgumentParser) -> list[str]:
    return [option for option in parser._option_string_actions if option.startswith("--")]


def _did_you_mean(given: Sequence[str], known: Sequence[str]) -> str:
    """ " (did you mean --max-n?)" for the closest known word to any given one, else ""."""
    for word in given:
        close = difflib.get_close_matches(word.split("=", 1)[0], known, n=1, cutoff=0.6)
        if close:
            return f" (did you mean {close[0]}?)"
    return ""


def _run(job_class: type[Job], args: argparse.Namespace, prog: str) -> int:
    try:
        options = RunOptions.given({name: getattr(args, name) for name in run_params(CLI) if hasattr(args, name)}, CLI)
    except ParamError as error:
        raise error.spoken(cli=True) from None
    _refuse_relative_out_under_job_submit(options.out)
    job = _job_from_args(job_class, args)
    try:
        result = run_job(job, options, Progress(job.name, quiet=options.quiet))
    except SpokenError as error:  # the run's words for its options, in the command line's spelling
        raise error.spoken(cli=True) from None
    summary = job.summary(result.tables, result.totals)
    if options.json:
        print(json.dumps(_run_json(job, result, summary), indent=2))
        return 0
    print(summary)
    if isinstance(job, BatchInputJob) and result.paths.get("errors"):  # which records, and why
        for line in rejection_lines(job.name, result.paths["errors"], len(result.tables["errors"])):
            print(line)
    print(
        f"{job.name}: {_plural(result.shards, 'shard')} ({result.reused} reused"
        + (f", {len(result.recomputed)} recomputed: {_why_recomputed(result)}" if result.recomputed else "")
        + f") in {result.seconds:.1f}s; tables in {result.location}"
    )
    return 0


def _why_recomputed(result) -> str:
    reasons = ["their input changed"] if result.input_changed else []
    reasons += [f"{result.code_change} changed"] if result.code_changed else []
    reasons += [f"parameters changed: {result.params_change}"] if result.params_changed else []
    explained = len(result.input_changed) + len(result.code_changed) + len(result.params_changed)
    if len(result.recomputed) > explained:
        reasons.append("damaged or stale")
    return "; ".join(reasons)


def _job_from_args(job_class: type[Job], args: argparse.Namespace) -> Job:
    """The job for parsed options, its parameter errors in the command line's words."""
    params = {name: getattr(args, name) for name in job_class.declared_params() if hasattr(args, name)}
    try:
        return job_class.create(**params)
    except ParamError as error:
        raise error.spoken(cli=True) from None


def parse_job(registry: JobRegistry, argv: Sequence[str], prog: str = "batchenum") -> Job:
    """The job ``prog run JOB [options]`` would run (``argv`` after ``run``), without running it:
    argparse's own errors exit 2 as on the command line, parameter errors raise ParamError."""
    args = build_parser(registry, prog, only_job=_one_job(registry, ["run", *argv])).parse_args(["run", *argv])
    return _job_from_args(registry.job_class(args.job), args)


def _run_json(job: Job, result, summary: str) -> dict:
    """``run --json``: the run's outcome, in the stable shape docs/cli.md describes."""
    return {
        "job": job.name,
        "location": result.location,
        "params": job.params(),
        "shards": result.shards,
        "reused": result.reused,
        "recomputed": list(result.recomputed),
        "seconds": round(result.seconds, 3),
        "tables": {name: {"path": result.paths.get(name), "rows": len(table)} for name, table in result.tables.items()},
        "totals": result.totals,
        "summary": summary,
    }


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _status(args: argparse.Namespace, registry: JobRegistry) -> int:
    from batchenum.pipeline.status import render, survey, to_json

    out = Storage.at(args.out)
    if out.local and not os.path.isdir(out.root):
        raise PipelineError(f"no such folder: {args.out} (give --out the folder a run wrote to)")
    found = survey(args.out)
    for status in found.jobs:
        job_class = _installed_job(registry, (status.plan or {}).get("job"))
        status.installed_code = installed_part(job_class) if job_class is not None else None
        status.expected_work = _planned_work(job_class, status.plan) if job_class is not None else None
    if args.json:
        print(json.dumps(to_json(found.jobs, others=found.others), indent=2))
    elif found.jobs:
        print(render(found.jobs, others=found.others))
    else:
        print(
            f"no job folder under {out.display_root}: nothing has run there yet"
            + (f" (its folders {', '.join(found.others)} were not written by batchenum)" if found.others else "")
        )
    return 0


def _installed_job(registry: JobRegistry, name: object) -> type[Job] | None:
    """The job registered here as ``name``, or None (no such job here: a job class of a script, or
    another installation's)."""
    if not isinstance(name, str) or is_job_path(name):
        return None
    try:
        return registry.own_module_job(name) or registry.jobs.get(name)
    except Exception:  # a module that does not import here: status still shows the folder
        return None


def _planned_work(job_class: type[Job], plan: dict | None) -> dict[str, float] | None:
    """{shard id: expected work} of a recorded plan's shards, planned again by the job installed
    here, when it gives each shard's (Job.shard_work) and plans the same shards; else None.  Only
    a job that gives it is planned, so that status never reads a batch's input to count shards."""
    params = (plan or {}).get("params")
    if not isinstance(params, dict):
        return None
    declared = job_class.declared_params()
    try:
        job = job_class.create(**{name: value for name, value in params.items() if name in declared})
        if type(job).shard_work is Job.shard_work:
            return None
        return expected_work(job, job.plan(PlanContext()))
    except Exception:  # parameters this installation's job refuses: the estimate counts shards
        return None


def _cleanup(args: argparse.Namespace) -> int:
    from batchenum.pipeline.lease import Lease
    from batchenum.pipeline.table_commit import MANIFEST_FILE, remove_shards

    out = Storage.at(args.out)
    if out.local and not os.path.isdir(out.root):
        raise PipelineError(f"no such folder: {args.out} (give --out the folder a run wrote to)")
    if args.job:
        check_file_name(args.job, "--job")  # a job's name, never a way out of DIR
    names = [args.job] if args.job else [os.path.basename(path.rstrip("/")) for path in out.list_dirs(out.root)]
    folders = []
    for name in names:
        folder = out.child(name)
        if name.startswith("_") or not folder.is_file(folder.join(MANIFEST_FILE)):
            if args.job:
                raise PipelineError(f"{folder.display_root} has no committed tables: nothing to clean up there")
            continue
        folders.append((name, folder))
    for _, folder in folders:  # a job folder replaced by a link: refused before anything is removed
        folder.refuse_links(folder.root)
    for name, folder in folders:
        with Lease(folder, say=lambda line: print(line, file=sys.stderr)):  # no run may write there meanwhile
            files, size = remove_shards(folder)
        print(
            f"{name}: removed {files} shard files ({size:,} bytes freed) from {folder.display_root}; "
            "a rerun computes its shards again"
        )
    if not args.job:
        _cleanup_inputs(out)
    return 0


def _cleanup_inputs(out: Storage) -> None:
    """The frames ``batchenum.run`` wrote to ``OUT/_inputs/`` that no job's tables or plan name."""
    from batchenum.pipeline.cleanup import INPUTS_DIR, RECENT_SECONDS, remove_unreferenced_inputs

    swept = remove_unreferenced_inputs(out)
    if swept.removed or swept.kept_recent:
        print(
            f"{INPUTS_DIR}: removed {_plural(swept.removed, 'input file')} that no job's tables or plan name "
            f"({swept.freed:,} bytes freed)"
            + (
                f"; kept {swept.kept_recent} written in the last {RECENT_SECONDS // 60} minutes "
                "(a run may be starting with them)"
                if swept.kept_recent
                else ""
            )
        )


def _refuse_relative_out_under_job_submit(out: str) -> None:
    """Under `ray job submit --working-dir`, the driver runs in Ray's temporary copy of the working
    directory: a relative --out would be written there and lost with it."""
    config = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    if not config or is_uri(out) or os.path.isabs(out):
        return
    try:
        working_dir = json.loads(config).get("runtime_env", {}).get("working_dir")
    except (ValueError, AttributeError):
        working_dir = None
    if working_dir:
        raise PipelineError(
            f"--out {out} is relative, and under `ray job submit --working-dir` it would land in "
            "Ray's temporary copy of the working directory and be lost: give an object-store URI "
            "(s3://bucket/prefix) or an absolute path that every node sees"
        )


def main(argv: Sequence[str] | None, registry: JobRegistry, prog: str = "batchenum", version: str = "unknown") -> int:
    with warnings.catch_warnings():  # restores Python's own display afterwards
        warnings.showwarning = _plugin_warnings_as_lines(prog, warnings.showwarning)
        return _main(argv, registry, prog, version)


def _plugin_warnings_as_lines(prog: str, shown: Callable[..., None]) -> Callable[..., None]:
    """An installed job left out (pipeline/registry.py) is one line, ``batchenum: warning: ...``,
    not Python's two (a file, a line of source); any other warning is shown as before."""

    def show(message: Any, category: type[Warning], *rest: Any, **named: Any) -> None:
        if issubclass(category, PluginWarning):
            print(f"{prog}: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, *rest, **named)

    return show


def _main(argv: Sequence[str] | None, registry: JobRegistry, prog: str, version: str) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser(registry, prog, version, only_job=_one_job(registry, argv))
    except UsageError as error:  # a job that cannot be loaded, or a MODULE:CLASS that names none
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    _log_progress_lines(prog)
    interrupted = _note_interrupts()
    try:
        return args.handler(args)
    except KeyboardInterrupt as stop:
        return _interrupted(prog, interrupted.signum, getattr(stop, "committed_shards", None))
    except SystemExit as stop:
        # ray.init replaces our SIGTERM handler with one that calls sys.exit(SIGTERM): stop as for ours
        if stop.code == signal.SIGTERM:
            return _interrupted(prog, signal.SIGTERM)
        raise
    except BrokenPipeError:
        return _pipe_closed()
    except UsageError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    except Exception as error:
        # Ctrl-C inside a library (Ray starting up, say) can surface as another exception
        if interrupted.is_set():
            return _interrupted(prog, interrupted.signum)
        if not isinstance(error, (PipelineError, ValueError, OSError)):
            raise
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 1


def _one_job(registry: JobRegistry, argv: Sequence[str]) -> str:
    """The job of a command line ``run JOB ...`` when JOB is ``MODULE:CLASS``, ``FILE.py:CLASS`` or a
    job its own module declares; "" when the parser must know every job (``run --help``, a typo)."""
    if len(argv) < 2 or argv[0] != "run":
        return ""
    job = argv[1]
    if is_job_path(job) or registry.own_module_job(job) is not None or job in registry.unloadable:
        return job  # (an installed job that cannot be loaded: its parser says why, in one line)
    return ""


class _Interrupt(threading.Event):
    """Set by the first Ctrl-C or SIGTERM; ``signum`` says which."""

    signum: int = signal.SIGINT


def _note_interrupts() -> _Interrupt:
    """An event set by Ctrl-C (SIGINT) or SIGTERM (``kill``, a scheduler stopping the job), each of
    which raises KeyboardInterrupt as Ctrl-C always did: the run stops the same way, committed shards
    kept.  ``interrupted.signum`` says which, for the exit status (130 or 143)."""
    interrupted = _Interrupt()
    if threading.current_thread() is threading.main_thread():

        def handler(signum, frame):
            interrupted.signum = signum
            interrupted.set()
            # Tasks cancelled in flight on a cluster can still end in an error (a commit refused once
            # the lease is given back); this process is ending, so Ray must not print them as unhandled.
            os.environ["RAY_IGNORE_UNHANDLED_ERRORS"] = "1"
            raise KeyboardInterrupt

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)
    return interrupted


def _log_progress_lines(prog: str) -> None:
    """Off a terminal, progress comes as ``batchenum`` logger records: give them timestamped lines on
    standard error, unless the application (a caller of ``main``) configured logging itself."""
    if not logging.getLogger().handlers and not sys.stderr.isatty():
        logging.basicConfig(
            level=logging.INFO, stream=sys.stderr, format=f"%(asctime)s {prog} %(message)s", datefmt="%Y-%m-%dT%H:%M:%S"
        )


def _pipe_closed() -> int:
    """The reader of our output went away (``batchenum table | head -2``): end quietly, as other
    command-line tools do, with standard output pointed at nothing so that the interpreter's own
    flush at exit does not fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


# ------------------------------------------------------------------- generate commands of batch jobs


def _check_generate_target(path: str) -> None:
    """``generate --out`` names a file whose folder exists: it never replaces a folder, and never
    creates folders it was not asked for."""
    if is_uri(path):
        return
    if os.path.isdir(path):
        raise UsageError(
            f"--out {path} is a folder: give a file name (for example {os.path.join(path, 'batch.jsonl')})"
        )
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"--out {path}: the folder {parent} does not exist; create it first, or give another path")


def write_generated(path: str, field: str, id_prefix: str, values: list[Any], value_type: Any, noun: str) -> int:
    """Write generated records with ids ``<prefix>1``, ``<prefix>2``... (zero-padded) atomically,
    say so, and return the exit status."""
    _check_generate_target(path)
    digits = len(str(len(values)))
    ids = [f"{id_prefix}{k:0{digits}d}" for k in range(1, len(values) + 1)]
    write_batch(path, field, ids, values, value_type)
    print(f"wrote {len(values)} {noun} to {path}")
    return 0
