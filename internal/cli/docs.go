package cli

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"

	"github.com/urfave/cli/v2"
)

// The flag reference in docs/operations.md sits between these markers.
const (
	flagRefBegin = "<!-- BEGIN FLAG REFERENCE: generated from internal/cli by 'go generate .'; do not edit -->"
	flagRefEnd   = "<!-- END FLAG REFERENCE -->"
)

// ErrNoMarkers is returned when a document lacks the flag reference markers.
var ErrNoMarkers = errors.New("cli: flag reference markers not found")

// machineDefaults describe defaults computed from the machine, so that the
// reference reads the same wherever it is generated.
var machineDefaults = map[string]string{"node-name": "the host name"}

// DocsCommand writes reference documentation generated from the command
// definitions. It is hidden: it serves 'go generate', not operators.
func DocsCommand() *cli.Command {
	return &cli.Command{
		Name:   "docs",
		Hidden: true,
		Usage:  "generate reference documentation from the command definitions",
		Subcommands: []*cli.Command{{
			Name:  "flags",
			Usage: "print the flag reference in Markdown, or replace it in a file between its markers",
			Flags: []cli.Flag{&cli.StringFlag{Name: "update", Usage: "Markdown file whose flag reference to replace"}},
			Action: func(c *cli.Context) error {
				ref := FlagReference(c.App)
				path := c.String("update")
				if path == "" {
					_, err := fmt.Fprint(c.App.Writer, ref)
					return err
				}
				doc, err := os.ReadFile(path)
				if err != nil {
					return cli.Exit(fmt.Sprintf("cannot read --update %s: %v", path, err), 1)
				}
				out, err := ReplaceFlagReference(string(doc), ref)
				if err != nil {
					return cli.Exit(fmt.Sprintf("%s: %v", path, err), 1)
				}
				if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
					return cli.Exit(err.Error(), 1)
				}
				return nil
			},
		}},
	}
}

// ReplaceFlagReference returns doc with the text between the flag
// reference markers replaced by ref.
func ReplaceFlagReference(doc, ref string) (string, error) {
	before, rest, ok := strings.Cut(doc, flagRefBegin)
	if !ok {
		return "", fmt.Errorf("%w: add a line %s and a line %s where the reference goes", ErrNoMarkers, flagRefBegin, flagRefEnd)
	}
	_, after, ok := strings.Cut(rest, flagRefEnd)
	if !ok {
		return "", fmt.Errorf("%w: %s has no %s after it", ErrNoMarkers, flagRefBegin, flagRefEnd)
	}
	return before + flagRefBegin + "\n" + ref + flagRefEnd + after, nil
}

// FlagReference renders the flags of app (a node, a table for each
// category) and of each of its visible commands as Markdown tables: flag,
// environment variable, default and meaning.
func FlagReference(app *cli.App) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n`slicerd`: a node (no command), its flags by category\n")
	for _, c := range agentFlagCategories {
		var flags []cli.Flag
		for _, f := range app.Flags {
			if cf, ok := f.(cli.CategorizableFlag); ok && cf.GetCategory() == c.name {
				flags = append(flags, f)
			}
		}
		writeFlagTable(&b, "", c.name, flags, machineDefaults)
	}
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden || c.Name == "help" {
				continue
			}
			name := prefix + " " + c.Name
			writeFlagTable(&b, name, c.Usage, c.Flags, nil)
			walk(name, c.Subcommands)
		}
	}
	walk("slicerd", app.Commands)
	b.WriteString("\n")
	return b.String()
}

func writeFlagTable(b *strings.Builder, name, usage string, flags []cli.Flag, defaults map[string]string) {
	var rows []string
	for _, f := range flags {
		df, ok := f.(cli.DocGenerationFlag)
		if !ok {
			continue
		}
		flagName := f.Names()[0]
		if flagName == "help" || flagName == "generate-bash-completion" || f == versionFlag {
			continue // added by the library, the same for every command, or not a setting
		}
		env := ""
		if vars := df.GetEnvVars(); len(vars) > 0 {
			env = "`" + strings.Join(vars, "`, `") + "`"
		}
		def, ok := defaults[flagName]
		if !ok {
			def = flagDefault(f, df)
		}
		rows = append(rows, fmt.Sprintf("| `--%s` | %s | %s | %s |", flagName, env, def, mdEscape(df.GetUsage())))
	}
	if len(rows) == 0 {
		return
	}
	heading := fmt.Sprintf("`%s`: %s", name, mdEscape(usage))
	if name == "" {
		heading = "*" + mdEscape(usage) + "*" // a category of the flags of the command before
	}
	fmt.Fprintf(b, "\n%s\n\n| flag | environment | default | meaning |\n|---|---|---|---|\n%s\n", heading, strings.Join(rows, "\n"))
}

// flagDefault renders a flag's default: a value as code, a description
// (DefaultText) as text, nothing for none.
func flagDefault(f cli.Flag, df cli.DocGenerationFlag) string {
	if v := reflect.ValueOf(f); v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct {
		if dt := v.Elem().FieldByName("DefaultText"); dt.IsValid() && dt.Kind() == reflect.String && dt.String() != "" {
			return mdEscape(dt.String())
		}
	}
	def := df.GetDefaultText()
	if len(def) >= 2 && def[0] == '"' && def[len(def)-1] == '"' {
		def = def[1 : len(def)-1]
	}
	if def == "" {
		return ""
	}
	return "`" + def + "`"
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
