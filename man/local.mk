# man/: one page per command, configuration file and API.
dist_man_MANS += man/jobfs.1 man/jobfs-stage.1 man/jobfsd.8 man/jobfs.conf.5 man/libjobfs.3
if JOBFS_FUSE
dist_man_MANS += man/jobfs-fuse.8
else
EXTRA_DIST += man/jobfs-fuse.8
endif
if JOBFS_SPANK
dist_man_MANS += man/spank_jobfs.8
else
EXTRA_DIST += man/spank_jobfs.8
endif
