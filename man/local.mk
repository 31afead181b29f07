# man/: one page per command, configuration file and API.
dist_man_MANS += man/jobfs.1 man/jobfsd.8 man/jobfs.conf.5 man/libjobfs.3
