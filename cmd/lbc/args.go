package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lbc-dev/lbc/examples"
	"github.com/lbc-dev/lbc/internal/spelling"
	"github.com/urfave/cli/v2"
)

// exampleFlag lets push and run use the embedded example, which they
// never do by default: a missing -c must not program a real datapath with
// the demo's VIPs.
var exampleFlag = &cli.BoolFlag{Name: "example", Usage: "use the embedded examples/" + examples.DefaultName + " (the demo) as the configuration; without it the command needs -c FILE"}

// guardArgs wraps the action of every command in list (and its
// subcommands) so that no argument is silently ignored: a flag after an
// argument (the flag parser stops at the first argument) is an error; a
// command that takes -c also takes the file as its one argument; any other
// argument of a command whose ArgsUsage does not name arguments is an
// error.
func guardArgs(list []*cli.Command, prefix string) {
	for _, cmd := range list {
		name := strings.TrimSpace(prefix + " " + cmd.Name)
		guardArgs(cmd.Subcommands, name)
		if cmd.Action == nil || cmd.SkipFlagParsing {
			continue
		}
		usage := cmd.UsageText
		if usage == "" {
			usage = strings.TrimSpace("lbc " + name + " [flags] " + strings.TrimSpace(cmd.ArgsUsage))
		}
		if cmd.OnUsageError == nil {
			cmd.OnUsageError = usageError(cmd, name, usage)
		}
		// The parser would check required flags before the action, so a
		// flag after the file (lbc explain lb.yaml -p ...) would read as
		// "Required flag "packet" not set", above the whole help. The
		// action checks them instead, after the arguments.
		var required []string
		for _, f := range cmd.Flags {
			if sf, ok := f.(*cli.StringFlag); ok && sf.Required {
				sf.Required = false
				required = append(required, sf.Name)
			}
		}
		cmd, action := cmd, cmd.Action
		cmd.Action = func(c *cli.Context) error {
			if err := checkArgs(c, cmd, name); err != nil {
				return err
			}
			for _, f := range required {
				if !c.IsSet(f) {
					return fmt.Errorf("%s needs --%s\nusage: %s\n(lbc help %s shows every flag)", name, f, usage, name)
				}
			}
			return action(c)
		}
	}
}

// usageError words a flag the parser refused as one short error, with the
// command's usage line, rather than the whole help around it, and names
// the flag of cmd an unknown one most likely meant.
func usageError(cmd *cli.Command, name, usage string) cli.OnUsageErrorFunc {
	return func(_ *cli.Context, err error, _ bool) error {
		mean := ""
		if unknown, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: "); ok {
			var known []string
			for _, f := range cmd.Flags {
				known = append(known, f.Names()...)
			}
			if near := spelling.Nearest(known, strings.TrimLeft(unknown, "-")); near != "" {
				mean = " (did you mean --" + near + "?)"
				if len(near) == 1 {
					mean = " (did you mean -" + near + "?)"
				}
			}
		}
		return fmt.Errorf("%s: %w%s\nusage: %s\n(lbc help %s shows every flag)", name, err, mean, usage, name)
	}
}

func checkArgs(c *cli.Context, cmd *cli.Command, name string) error {
	args := c.Args().Slice()
	for _, a := range args {
		if strings.HasPrefix(a, "-") && a != "-" {
			flags, rest := reorder(cmd, args)
			return fmt.Errorf("%s: flag %s comes after an argument and would not be read; put every flag before the arguments: lbc %s",
				name, a, strings.Join(append(append([]string{name, "[flags]"}, flags...), rest...), " "))
		}
	}
	if strings.TrimSpace(cmd.ArgsUsage) != "" || len(args) == 0 {
		return nil
	}
	if slices.Contains(cmd.Flags, cli.Flag(configFlag)) {
		switch {
		case len(args) > 1:
			return fmt.Errorf("%s takes one configuration file, got %d arguments (%s)", name, len(args), strings.Join(args, " "))
		case c.String(configFlag.Name) != "":
			return fmt.Errorf("%s: both -c %s and the argument %s name the configuration; give one", name, c.String(configFlag.Name), args[0])
		}
		return c.Set(configFlag.Name, args[0])
	}
	return fmt.Errorf("%s takes no arguments (got %q); see lbc %s --help", name, strings.Join(args, " "), name)
}

// reorder splits what the parser left unread into the flags (each with
// its value, unless it is a boolean or written --flag=value) and the
// arguments, for the command line to suggest.
func reorder(cmd *cli.Command, args []string) (flags, rest []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			rest = append(rest, a)
			continue
		}
		flags = append(flags, a)
		if strings.Contains(a, "=") || i+1 == len(args) {
			continue
		}
		n := strings.TrimLeft(a, "-")
		for _, f := range cmd.Flags {
			if !slices.Contains(f.Names(), n) {
				continue
			}
			if _, isBool := f.(*cli.BoolFlag); !isBool {
				i++
				flags = append(flags, quoteArg(args[i]))
			}
		}
	}
	return flags, rest
}

// quoteArg quotes a value with spaces for a shell: "tcp 1.2.3.4:1 > ...".
func quoteArg(s string) string {
	if strings.ContainsAny(s, " \t<>|&;'\"$") {
		return fmt.Sprintf("%q", s)
	}
	return s
}

// requireConfig is for commands that program a datapath: they need -c
// (or the file as their argument), or --example to use the demo.
func requireConfig(c *cli.Context) error {
	if c.String(configFlag.Name) != "" || c.Bool(exampleFlag.Name) {
		return nil
	}
	return fmt.Errorf("%s needs the configuration to program: -c lb.yaml (or --example for the embedded examples/%s, the demo)", c.Command.FullName(), examples.DefaultName)
}
