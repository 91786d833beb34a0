"""Command-line tools: the `magpie-tts` entry point and its subcommands."""
