package main

import (
	"flag"
	"strings"
)

// envPrefix starts the name of the environment variable that sets a flag: INORDER_WEBHOOK_URL sets
// --webhook-url. A flag given on the command line wins over its variable.
const envPrefix = "INORDER_"

// envName is the environment variable of flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// envHelp is the line every command's help ends with.
const envHelp = "Every flag may also be set in the environment as INORDER_<FLAG>, dashes as underscores " +
	"(INORDER_WEBHOOK_URL for --webhook-url); a flag on the command line wins.\n"

// flagsFromEnv sets every flag of fs that the command line left unset from its environment variable, when
// that is set. A value its flag refuses is a usage error naming the variable (not its value, which may
// be a secret).
func flagsFromEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	return setFromEnv(fs, lookup, given)
}

// setFromEnv sets every flag of fs but those in skip from its environment variable, when that is set.
func setFromEnv(fs *flag.FlagSet, lookup func(string) (string, bool), skip map[string]bool) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || skip[f.Name] {
			return
		}
		name := envName(f.Name)
		v, ok := lookup(name)
		if !ok {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = usageErr("%s (for --%s) holds a value the flag refuses: %s", name, f.Name,
				oneLineText(strings.ReplaceAll(serr.Error(), v, "…")))
		}
	})
	return err
}
