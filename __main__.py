"""The twc Pulumi program: read config → load the fleet → build components → export."""

from twc import program

program.main()
