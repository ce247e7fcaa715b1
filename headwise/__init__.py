"""The `headwise` command line. Each subcommand imports only what it needs, so
`headwise serve` never loads torch."""
