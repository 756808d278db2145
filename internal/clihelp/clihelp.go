// Package clihelp gives lbc's command-line programs one behaviour for help
// and for commands that do not exist: `prog help [COMMAND...]` prints the
// command's help, and an unknown command is an error that lists the known
// ones (urfave/cli would print "No help topic for 'x'" and exit 3).
package clihelp

import (
	"fmt"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"
)

// Install adds the help command to app (set HideHelpCommand so that
// urfave/cli adds none of its own), gives every command group an action
// that rejects an unknown subcommand, and makes app's own action reject an
// unknown command before calling root (nil: print the app's help).
func Install(app *cli.App, root cli.ActionFunc) {
	app.HideHelpCommand = true
	app.Commands = append(app.Commands, helpCommand(app.Name))
	guardGroups(app.Commands)
	app.Action = func(c *cli.Context) error {
		if c.NArg() > 0 {
			return Unknown(c.App.Name, "", c.App.Commands, c.Args().First())
		}
		if root != nil {
			return root(c)
		}
		return cli.ShowAppHelp(c)
	}
}

func helpCommand(app string) *cli.Command {
	return &cli.Command{
		Name:      "help",
		Usage:     "describe " + app + ", or one of its commands",
		ArgsUsage: "[COMMAND [SUBCOMMAND]]",
		Action: func(c *cli.Context) error {
			args := c.Args().Slice()
			if len(args) == 0 {
				return cli.ShowAppHelp(c)
			}
			list := c.App.Commands
			for i, name := range args {
				cmd := find(list, name)
				if cmd == nil {
					return Unknown(c.App.Name, strings.Join(args[:i], " "), list, name)
				}
				list = cmd.Subcommands
			}
			// A command's help is what COMMAND --help prints.
			return c.App.Run(append(append([]string{c.App.Name}, args...), "--help"))
		},
	}
}

func find(list []*cli.Command, name string) *cli.Command {
	for _, c := range list {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// Unknown is the error for a command that does not exist in group ("" for
// the program's own commands, "gslb" for its subcommands), listing the
// ones that do. The program prints it after its own name.
func Unknown(app, group string, list []*cli.Command, name string) error {
	var names []string
	for _, cmd := range list {
		if !cmd.Hidden {
			names = append(names, cmd.Name)
		}
	}
	sort.Strings(names)
	prefix, help := "", app
	if group != "" {
		prefix, help = group+": ", app+" "+group
	}
	return fmt.Errorf("%sunknown command %q; commands: %s (%s --help)", prefix, name, strings.Join(names, ", "), help)
}

// guardGroups gives every command group without an action one that names
// an unknown subcommand, or prints the group's help.
func guardGroups(list []*cli.Command) {
	for _, cmd := range list {
		if len(cmd.Subcommands) == 0 {
			continue
		}
		if cmd.Action == nil {
			cmd.Action = func(c *cli.Context) error {
				if c.NArg() > 0 {
					return Unknown(c.App.Name, c.Command.Name, c.Command.Subcommands, c.Args().First())
				}
				return cli.ShowSubcommandHelp(c)
			}
		}
		guardGroups(cmd.Subcommands)
	}
}
