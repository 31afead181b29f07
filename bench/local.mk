# bench/: filled below
