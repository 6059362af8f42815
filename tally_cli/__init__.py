"""The `tally` command for the people who operate Tally."""
