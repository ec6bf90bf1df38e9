"""`gcd completion bash|zsh|fish`: a shell completion script for `gcd` and `watermark`.

    gcd completion bash > ~/.local/share/bash-completion/completions/gcd   # or: eval "$(...)"
    gcd completion zsh  > "${fpath[1]}/_gcd"                                # or: eval in .zshrc
    gcd completion fish > ~/.config/fish/completions/gcd.fish               # or: | source

The script is generated from the same argparse parsers the commands use (every
subcommand's module, `watermark.cli.main.build_parser`), so it names every command,
action and flag there is, and it is static: a TAB costs no Python start. That is why
it is generated rather than `argcomplete`, which starts the program on every TAB (our
`gcd` builds one parser per subcommand, lazily, so argcomplete would need a second,
eager parser tree just for completion) and adds a dependency. Regenerate the script
after an upgrade. zsh uses it through `bashcompinit`. A flag's value completes from its
choices (`--storage s3|azure|gcs`, `--log-level ...`); any other value, and a word that
is not a flag, completes as a file name (`--config FILE`, `--plan-out`, ...).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Iterator

from watermark import exitcodes

__all__ = ["add_arguments", "command_tree", "run", "script"]

Tree = dict[str, tuple[list[str], list[str], dict[str, list[str]]]]
"""'gcd sweep' (a command path) -> (its flags, the words that may follow it, and for each
flag that takes a value from a fixed list, that list)."""
SHELLS = ("bash", "zsh", "fish")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`gcd completion` options."""
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete for")


def _walk(
    parser: argparse.ArgumentParser, path: str
) -> Iterator[tuple[str, list[str], list[str], dict[str, list[str]]]]:
    flags: list[str] = []
    words: list[str] = []
    values: dict[str, list[str]] = {}
    children: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        named = [s for s in action.option_strings if s.startswith("--") or s == "-h"]
        flags.extend(named)
        if isinstance(action, argparse._SubParsersAction):
            children.extend(action.choices.items())
            words.extend(action.choices)
        elif not action.option_strings and action.choices:
            words.extend(str(choice) for choice in action.choices)
        elif action.nargs != 0 and (
            vocabulary := action.choices or getattr(action, "completions", ())
        ):
            values.update((flag, [str(c) for c in vocabulary]) for flag in named)
    yield path, sorted(set(flags)), words, values
    for name, child in children:
        yield from _walk(child, f"{path} {name}")


def command_tree() -> Tree:
    """Every command path of `gcd` and `watermark`, its flags and the words after it."""
    from gcd.cli.main import SUBCOMMANDS, _load  # noqa: PLC0415 - import cycle with main
    from watermark.cli.main import build_parser  # noqa: PLC0415 - only for this command
    from watermark.options import CommandParser  # noqa: PLC0415

    tree: Tree = {"gcd": (["--help", "--version"], list(SUBCOMMANDS), {})}
    parsers: dict[str, argparse.ArgumentParser] = {}
    for name in SUBCOMMANDS:
        module = _load(name)
        if isinstance(module, str):  # not installed here (e.g. pyspark): no flags to offer
            continue
        parser = CommandParser(prog=f"gcd {name}")
        module.add_arguments(parser)
        parsers[name] = parser
        for path, flags, words, values in _walk(parser, f"gcd {name}"):
            tree[path] = (flags, words, values)
    for path, flags, words, values in _walk(build_parser(), "watermark"):
        tree[path] = (flags + (["--version"] if path == "watermark" else []), words, values)
    if "namespace" in parsers:  # `watermark namespace` is gcd's command
        for path, flags, words, values in _walk(parsers["namespace"], "watermark namespace"):
            tree[path] = (flags, words, values)
    return tree


def script(shell: str, tree: Tree) -> str:
    """The completion script for `shell` (bash, or zsh through bashcompinit)."""
    if shell == "fish":
        return _fish(tree)
    cases = []
    value_cases = []
    for path, (flags, words, values) in sorted(tree.items()):
        cases.append(
            f"        {shlex.quote(path)}) flags={shlex.quote(' '.join(flags))}; "
            f"words={shlex.quote(' '.join(words))};;"
        )
        value_cases += [
            f"        {shlex.quote(f'{path} {flag}')}) words={shlex.quote(' '.join(choices))};;"
            for flag, choices in sorted(values.items())
        ]
    body = "\n".join(cases)
    value_body = "\n".join(value_cases)
    text = f"""# l0gc shell completion for gcd and watermark ({shell}), by `gcd completion`
_l0gc_complete() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} path=${{COMP_WORDS[0]##*/}} i flags words
    for ((i = 1; i < COMP_CWORD; i++)); do
        [[ ${{COMP_WORDS[i]}} == -* ]] && break
        case " $(_l0gc_words "$path") " in
            *" ${{COMP_WORDS[i]}} "*) path="$path ${{COMP_WORDS[i]}}";;
            *) break;;
        esac
    done
    _l0gc_lookup "$path"
    if (( COMP_CWORD > 1 )) && _l0gc_values "$path ${{COMP_WORDS[COMP_CWORD-1]}}"; then
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    elif [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    fi
}}
_l0gc_words() {{ local flags words; _l0gc_lookup "$1"; echo "$words"; }}
_l0gc_values() {{
    case "$1" in
{value_body}
        *) return 1;;
    esac
}}
_l0gc_lookup() {{
    flags=""; words=""
    case "$1" in
{body}
    esac
}}
"""
    if shell == "zsh":
        text += "autoload -U +X bashcompinit && bashcompinit\n"
    return text + "complete -o default -F _l0gc_complete gcd watermark\n"


def _fish(tree: Tree) -> str:
    """The fish script: `__l0gc_path` walks the command line to its command path (as the
    bash function does); each completion applies only on its own path."""
    lines = [
        "# l0gc shell completion for gcd and watermark (fish), by `gcd completion`",
        "function __l0gc_path",
        "    set -l tokens (commandline -opc)",
        "    set -l path (basename -- $tokens[1])",
        "    for token in $tokens[2..-1]",
        "        string match -q -- '-*' $token; and break",
        "        contains -- $token (__l0gc_words $path); or break",
        '        set path "$path $token"',
        "    end",
        "    echo $path",
        "end",
        "function __l0gc_words",
        "    switch $argv[1]",
    ]
    for path, (_, words, _) in sorted(tree.items()):
        if words:
            lines.append(
                f"        case {shlex.quote(path)}; printf '%s\\n' "
                f"{' '.join(shlex.quote(w) for w in words)}"
            )
    lines += ["    end", "end"]
    for path, (flags, words, values) in sorted(tree.items()):
        command = path.split()[0]
        on = f"-n \"test (__l0gc_path) = '{path}'\""  # paths are words: no quotes in them
        if words:
            lines.append(f"complete -c {command} {on} -f -a {shlex.quote(' '.join(words))}")
        for flag in flags:
            if not flag.startswith("--"):
                continue
            spec = f"complete -c {command} {on} -l {shlex.quote(flag[2:])}"
            if flag in values:
                spec += f" -x -a {shlex.quote(' '.join(values[flag]))}"
            lines.append(spec)
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    """Print the script for `args.shell`."""
    sys.stdout.write(script(args.shell, command_tree()))
    return exitcodes.OK
