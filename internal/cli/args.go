package cli

import (
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// flagsFirst returns args (args[0] is the program name) with the flags of
// the command they run moved before its positional arguments, so that
// 'slicerd job get kv --addr X' means what 'slicerd job get --addr X kv'
// does: urfave/cli v2, like package flag, stops reading flags at the first
// argument that is not one, and would take the rest as arguments.
// Everything after "--" stays an argument. Arguments that name no command,
// and the flags of commands with subcommands, are left where they are.
func flagsFirst(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	rest := args[1:]
	completion := rest[len(rest)-1] == "--generate-bash-completion"
	if completion {
		rest = rest[:len(rest)-1] // it must stay last
	}
	flags, cmds := app.Flags, app.Commands
	for {
		// The flags of this level, then the name of a subcommand.
		i := 0
		for i < len(rest) && isFlagArg(rest[i]) {
			if takesValue(flags, rest[i]) {
				i++
			}
			i++
		}
		i = min(i, len(rest))
		out, rest = append(out, rest[:i]...), rest[i:]
		var cmd *cli.Command
		if len(rest) > 0 {
			cmd = findCommand(cmds, rest[0])
		}
		if cmd == nil {
			out = append(out, rest...)
			break
		}
		out, rest = append(out, rest[0]), rest[1:]
		flags, cmds = cmd.Flags, cmd.Subcommands
		if len(cmds) == 0 {
			out = append(out, leafFlagsFirst(flags, rest)...)
			break
		}
	}
	if completion {
		out = append(out, "--generate-bash-completion")
	}
	return out
}

// leafFlagsFirst moves the flags in args, a command's arguments, before the
// others.
func leafFlagsFirst(flags []cli.Flag, args []string) []string {
	var fs, pos []string
	for i := 0; i < len(args); {
		switch a := args[i]; {
		case a == "--":
			pos = append(pos, args[i+1:]...)
			i = len(args)
		case isFlagArg(a) && takesValue(flags, a) && i == len(args)-1:
			// Its value is missing: let the flag's error be the one
			// reported, not the arguments' it would take as its value.
			return append(fs, a)
		case isFlagArg(a) && takesValue(flags, a):
			fs = append(fs, a, args[i+1])
			i += 2
		case isFlagArg(a):
			fs = append(fs, a)
			i++
		default:
			pos = append(pos, a)
			i++
		}
	}
	if slices.ContainsFunc(pos, isFlagArg) {
		fs = append(fs, "--") // they came after "--"
	}
	return append(fs, pos...)
}

func isFlagArg(a string) bool { return len(a) > 1 && a[0] == '-' && a != "--" }

// takesValue reports whether arg, one of flags, takes a value given as the
// next argument: one that is not a boolean, without "=value".
func takesValue(flags []cli.Flag, arg string) bool {
	name := strings.TrimLeft(arg, "-")
	if strings.Contains(name, "=") {
		return false
	}
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			df, ok := f.(cli.DocGenerationFlag)
			return ok && df.TakesValue()
		}
	}
	return false
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}
