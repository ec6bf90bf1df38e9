"""`gcd completion bash|zsh`: a shell completion script for `gcd` and `watermark`.

    gcd completion bash > ~/.local/share/bash-completion/completions/gcd   # or: eval "$(...)"
    gcd completion zsh  > "${fpath[1]}/_gcd"                                # or: eval in .zshrc

The script is generated from the same argparse parsers the commands use (every
subcommand's module, `watermark.cli.main.build_parser`), so it names every command,
action and flag there is, and it is static: a TAB costs no Python start. That is why
it is generated rather than `argcomplete`, which starts the program on every TAB (our
`gcd` builds one parser per subcommand, lazily, so argcomplete would need a second,
eager parser tree just for completion) and adds a dependency. Regenerate the script
after an upgrade. zsh uses it through `bashcompinit`. Words that are not flags complete
as file names (`--config FILE`, `--plan-out`, ...).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Iterator

from watermark import exitcodes

__all__ = ["add_arguments", "command_tree", "run", "script"]

Tree = dict[str, tuple[list[str], list[str]]]
"""'gcd sweep' (a command path) -> (its flags, the words that may follow it)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`gcd completion` options."""
    parser.add_argument("shell", choices=["bash", "zsh"], help="the shell to complete for")


def _walk(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, list[str], list[str]]]:
    flags: list[str] = []
    words: list[str] = []
    children: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        flags.extend(s for s in action.option_strings if s.startswith("--") or s == "-h")
        if isinstance(action, argparse._SubParsersAction):
            children.extend(action.choices.items())
            words.extend(action.choices)
        elif not action.option_strings and action.choices:
            words.extend(str(choice) for choice in action.choices)
    yield path, sorted(set(flags)), words
    for name, child in children:
        yield from _walk(child, f"{path} {name}")


def command_tree() -> Tree:
    """Every command path of `gcd` and `watermark`, its flags and the words after it."""
    from gcd.cli.main import SUBCOMMANDS, _load  # noqa: PLC0415 - import cycle with main
    from watermark.cli.main import build_parser  # noqa: PLC0415 - only for this command
    from watermark.options import CommandParser  # noqa: PLC0415

    tree: Tree = {"gcd": (["--help", "--version"], list(SUBCOMMANDS))}
    parsers: dict[str, argparse.ArgumentParser] = {}
    for name in SUBCOMMANDS:
        module = _load(name)
        if isinstance(module, str):  # not installed here (e.g. pyspark): no flags to offer
            continue
        parser = CommandParser(prog=f"gcd {name}")
        module.add_arguments(parser)
        parsers[name] = parser
        for path, flags, words in _walk(parser, f"gcd {name}"):
            tree[path] = (flags, words)
    for path, flags, words in _walk(build_parser(), "watermark"):
        tree[path] = (flags + (["--version"] if path == "watermark" else []), words)
    if "namespace" in parsers:  # `watermark namespace` is gcd's command
        for path, flags, words in _walk(parsers["namespace"], "watermark namespace"):
            tree[path] = (flags, words)
    return tree


def script(shell: str, tree: Tree) -> str:
    """The completion script for `shell` (bash, or zsh through bashcompinit)."""
    cases = []
    for path, (flags, words) in sorted(tree.items()):
        cases.append(f"        {shlex.quote(path)}) flags={shlex.quote(' '.join(flags))}; "
                     f"words={shlex.quote(' '.join(words))};;")  # fmt: skip
    body = "\n".join(cases)
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
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    fi
}}
_l0gc_words() {{ local flags words; _l0gc_lookup "$1"; echo "$words"; }}
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


def run(args: argparse.Namespace) -> int:
    """Print the script for `args.shell`."""
    sys.stdout.write(script(args.shell, command_tree()))
    return exitcodes.OK
