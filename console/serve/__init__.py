"""`phantom serve`: the TUI in a browser through textual-serve (each browser tab runs its own
`phantom` process, a front end like the pane in tmux)."""
