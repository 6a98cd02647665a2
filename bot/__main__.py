"""`python -m wakeful.bot`: the `wakeful` command, for a process started without the script."""

from wakeful.bot.commands.cli import main

raise SystemExit(main())
