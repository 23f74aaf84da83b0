"""The programs behind ``heteroreason``'s subcommands, one module each: ``main(argv, prog)``
parses the subcommand's options, checks them and its output directory before any work, and
returns the exit status (2 on bad input)."""
