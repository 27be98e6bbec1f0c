"$MPRESS" profile --help --
