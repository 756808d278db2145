package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// Shell completion: the shell asks lbc itself for the words that may
// follow (urfave/cli's --generate-bash-completion), so the completions are
// always this binary's commands and flags.
const bashCompletion = `# lbc completion for bash: source it, or put it in /etc/bash_completion.d/lbc
_lbc_complete() {
  local cur="${COMP_WORDS[COMP_CWORD]}" words q
  if [[ "$cur" == -* ]]; then
    q="$cur"; [[ "$q" == "--" ]] && q="-"   # a bare -- would end the flags
    words=$("${COMP_WORDS[0]}" "${COMP_WORDS[@]:1:$COMP_CWORD-1}" "$q" --generate-bash-completion 2>/dev/null)
  else
    words=$("${COMP_WORDS[0]}" "${COMP_WORDS[@]:1:$COMP_CWORD-1}" --generate-bash-completion 2>/dev/null)
  fi
  if [[ -z "$words" && "$cur" != -* ]]; then
    COMPREPLY=($(compgen -f -- "$cur"))
  else
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
  fi
}
complete -o filenames -F _lbc_complete lbc
`

const zshCompletion = `#compdef lbc
# lbc completion for zsh: put it in a directory of $fpath as _lbc
_lbc() {
  local -a words_
  local cur=${words[CURRENT]} q
  if [[ "$cur" == -* ]]; then
    q=$cur; [[ "$q" == "--" ]] && q="-"   # a bare -- would end the flags
    words_=(${(f)"$(${words[1]} ${words[2,CURRENT-1]} $q --generate-bash-completion 2>/dev/null)"})
  else
    words_=(${(f)"$(${words[1]} ${words[2,CURRENT-1]} --generate-bash-completion 2>/dev/null)"})
  fi
  if (( ${#words_} )); then compadd -a words_; else _files; fi
}
compdef _lbc lbc
`

var completionCommand = &cli.Command{
	Name:      "completion",
	Usage:     "print the shell completion script (bash or zsh)",
	ArgsUsage: "bash|zsh",
	Description: `Prints a script that completes lbc's commands, subcommands and flags in
the shell, by asking lbc itself, so it always matches the binary.

   source <(lbc completion bash)                       # this shell
   lbc completion bash > /etc/bash_completion.d/lbc    # every bash
   lbc completion zsh > "${fpath[1]}/_lbc"             # zsh`,
	Action: func(c *cli.Context) error {
		switch c.Args().First() {
		case "bash":
			fmt.Fprint(c.App.Writer, bashCompletion)
		case "zsh":
			fmt.Fprint(c.App.Writer, zshCompletion)
		default:
			return fmt.Errorf("completion: name the shell: lbc completion bash, or lbc completion zsh (got %q)", c.Args().First())
		}
		if c.NArg() > 1 {
			return fmt.Errorf("completion takes one shell, got %q", c.Args().Slice())
		}
		return nil
	},
}
