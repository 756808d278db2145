// Package clihelp gives lbc's command-line programs one behaviour for help
// and for commands that do not exist: `prog help [COMMAND...]` prints the
// command's help, and an unknown command is an error that lists the known
// ones (urfave/cli would print "No help topic for 'x'" and exit 3).
package clihelp

import (
	"fmt"
	"sort"
	"strings"

	"github.com/lbc-dev/lbc/internal/spelling"
	"github.com/urfave/cli/v2"
)

// Install adds the help command to app (set HideHelpCommand so that
// urfave/cli adds none of its own), gives every command group an action
// that rejects an unknown subcommand, and makes app's own action reject an
// unknown command before calling root (nil: print the app's help).
//
// Install also adds --help/-h to app's own flags: urfave/cli adds them only
// when the app has no command named help, so with ours `prog --help` would
// fail with "flag: help requested" and exit 1.
func Install(app *cli.App, root cli.ActionFunc) {
	app.HideHelpCommand = true
	cli.FlagStringer = namesOnce
	// A program's commands are package variables, shared by every App
	// its tests build; urfave/cli writes each command's HelpName when an
	// App runs, and the next App would prefix it again ("lbc lbc gslb").
	clearHelpNames(app.Commands)
	app.Commands = append(app.Commands, helpCommand(app.Name))
	if cli.HelpFlag != nil && !hasFlag(app.Flags, cli.HelpFlag) {
		app.Flags = append(app.Flags, cli.HelpFlag)
	}
	guardGroups(app.Name, app.Commands)
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

// urfaveStringer is urfave/cli's own flag line, which namesOnce trims.
var urfaveStringer = cli.FlagStringer

// namesOnce is a flag's line of --help with its names once: urfave/cli
// writes a repeatable flag's twice, "--target KIND, -t KIND [ --target
// KIND, -t KIND ]", which reads as the notation repeated. A repeatable
// flag's usage says that it repeats.
func namesOnce(f cli.Flag) string {
	s := urfaveStringer(f)
	names, rest, ok := strings.Cut(s, "\t")
	if before, after, cut := strings.Cut(names, " [ "); ok && cut && after == before+" ]" {
		return before + "\t" + rest
	}
	return s
}

func helpCommand(app string) *cli.Command {
	return &cli.Command{
		Name:      "help",
		Usage:     "describe " + app + ", or one of its commands",
		UsageText: app + " help [COMMAND [SUBCOMMAND]]",
		// Its arguments are command names; --help and -h among them are
		// read here, not by urfave/cli, which would show the app's page
		// for `help --help`.
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			var args []string
			asked := false
			for _, a := range c.Args().Slice() {
				if isHelpFlag(a) {
					asked = true
				} else {
					args = append(args, a)
				}
			}
			if len(args) == 0 {
				if asked { // help --help: this command's own page
					cli.HelpPrinter(c.App.Writer, cli.CommandHelpTemplate, c.Command)
					return nil
				}
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

func clearHelpNames(list []*cli.Command) {
	for _, cmd := range list {
		cmd.HelpName = ""
		clearHelpNames(cmd.Subcommands)
	}
}

// isHelpFlag reports whether arg asks for help as a flag.
func isHelpFlag(arg string) bool {
	switch arg {
	case "--help", "-help", "-h", "--h":
		return true
	}
	return false
}

// hasFlag reports whether flags holds a flag with one of f's names.
func hasFlag(flags []cli.Flag, f cli.Flag) bool {
	for _, g := range flags {
		for _, n := range g.Names() {
			for _, m := range f.Names() {
				if n == m {
					return true
				}
			}
		}
	}
	return false
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
	mean := ""
	if near := spelling.Nearest(names, name); near != "" {
		mean = fmt.Sprintf(" (did you mean %q?)", near)
	}
	return fmt.Errorf("%sunknown command %q%s; commands: %s (%s --help)", prefix, name, mean, strings.Join(names, ", "), help)
}

// guardGroups gives every command group without an action one that names
// an unknown subcommand, or prints the group's help, and without a usage
// text one that says a subcommand comes next (urfave/cli's would be
// "prog group [command options]"). path is the group's parent, from the
// program's name.
func guardGroups(path string, list []*cli.Command) {
	for _, cmd := range list {
		if !isGroup(cmd) {
			continue
		}
		if cmd.UsageText == "" {
			cmd.UsageText = path + " " + cmd.Name + " COMMAND [command options]"
		}
		if cmd.Action == nil {
			cmd.Action = func(c *cli.Context) error {
				if c.NArg() > 0 {
					return Unknown(c.App.Name, c.Command.Name, c.Command.Subcommands, c.Args().First())
				}
				return cli.ShowSubcommandHelp(c)
			}
		}
		guardGroups(path+" "+cmd.Name, cmd.Subcommands)
	}
}

// isGroup reports whether cmd has subcommands of its own: urfave/cli adds a
// help subcommand to every command it runs (to print its help), which in a
// test that runs several Apps stays in the shared command for the next.
func isGroup(cmd *cli.Command) bool {
	for _, sub := range cmd.Subcommands {
		if sub.Name != "help" {
			return true
		}
	}
	return false
}
