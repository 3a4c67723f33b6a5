from feedprof.cli import entry

entry()
