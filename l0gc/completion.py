"""Shell completion scripts (bash, zsh, fish) generated from a command's argparse parser.

    gcd completion bash > ~/.local/share/bash-completion/completions/gcd   # or: eval "$(...)"
    watermark completion zsh > "${fpath[1]}/_watermark"                    # or: eval in .zshrc

Static (a TAB costs no Python start) and complete: every command path, flag and fixed list
of flag values the parser has. Each command's script defines its own functions, so the
scripts of `gcd` and `watermark` can both be sourced. Regenerate after an upgrade.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator

__all__ = ["SHELLS", "Tree", "script", "tree_of"]

Tree = dict[str, tuple[list[str], list[str], dict[str, list[str]]]]
"""'gcd sweep' (a command path) -> (its flags, the words that may follow it, and for each
flag that takes a value from a fixed list, that list)."""
SHELLS = ("bash", "zsh", "fish")


def tree_of(parser: argparse.ArgumentParser, command: str, *, top: tuple[str, ...] = ()) -> Tree:
    """Every command path of `parser` (named `command`), its flags and the words after it;
    `top`: flags the top level takes besides the parser's (``--version``)."""
    tree: Tree = {}
    for path, flags, words, values in _walk(parser, command):
        tree[path] = (sorted({*flags, *(top if path == command else ())}), words, values)
    return tree


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


def script(shell: str, tree: Tree, command: str) -> str:
    """The completion script of `command` for `shell` (bash, or zsh through bashcompinit)."""
    if shell == "fish":
        return _fish(tree, command)
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
    text = f"""# l0gc shell completion for {command} ({shell}), by `{command} completion`
_l0gc_{command}_complete() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} path=${{COMP_WORDS[0]##*/}} i flags words
    for ((i = 1; i < COMP_CWORD; i++)); do
        [[ ${{COMP_WORDS[i]}} == -* ]] && break
        case " $(_l0gc_{command}_words "$path") " in
            *" ${{COMP_WORDS[i]}} "*) path="$path ${{COMP_WORDS[i]}}";;
            *) break;;
        esac
    done
    _l0gc_{command}_lookup "$path"
    if (( COMP_CWORD > 1 )) && _l0gc_{command}_values "$path ${{COMP_WORDS[COMP_CWORD-1]}}"; then
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    elif [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    fi
}}
_l0gc_{command}_words() {{ local flags words; _l0gc_{command}_lookup "$1"; echo "$words"; }}
_l0gc_{command}_values() {{
    case "$1" in
{value_body}
        *) return 1;;
    esac
}}
_l0gc_{command}_lookup() {{
    flags=""; words=""
    case "$1" in
{body}
    esac
}}
"""
    if shell == "zsh":
        text += "autoload -U +X bashcompinit && bashcompinit\n"
    return text + f"complete -o default -F _l0gc_{command}_complete {command}\n"


def _fish(tree: Tree, command: str) -> str:
    """The fish script: `__l0gc_path` walks the command line to its command path (as the
    bash function does); each completion applies only on its own path."""
    lines = [
        f"# l0gc shell completion for {command} (fish), by `{command} completion`",
        f"function __l0gc_{command}_path",
        "    set -l tokens (commandline -opc)",
        "    set -l path (basename -- $tokens[1])",
        "    for token in $tokens[2..-1]",
        "        string match -q -- '-*' $token; and break",
        f"        contains -- $token (__l0gc_{command}_words $path); or break",
        '        set path "$path $token"',
        "    end",
        "    echo $path",
        "end",
        f"function __l0gc_{command}_words",
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
        on = f"-n \"test (__l0gc_{command}_path) = '{path}'\""  # paths are words: no quotes in them
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
