"""Reading the capture kit's recorded transcripts (and, later, replaying them)."""
