# spank-plugin/: spank_jobfs.so, the Slurm SPANK plugin (srun/sbatch/salloc --jobfs). A
# libtool module installed into Slurm's plugin directory (--with-slurm-plugin-dir); it starts
# the installed jobfsd, jobfs-fuse and jobfs programs and links none of jobfs's code.
EXTRA_DIST += spank-plugin/README.md
if JOBFS_SPANK
slurmplugindir = @SLURM_PLUGIN_DIR@
slurmplugin_LTLIBRARIES = spank-plugin/spank_jobfs.la
spank_plugin_spank_jobfs_la_SOURCES = \
	spank-plugin/jobfs_spank.h \
	spank-plugin/spank_jobfs.c \
	spank-plugin/jobfs_config.c \
	spank-plugin/jobfs_options.c \
	spank-plugin/jobfs_srun.c \
	spank-plugin/jobfs_prolog.c \
	spank-plugin/jobfs_leftovers.c \
	spank-plugin/jobfs_slurmstepd.c \
	spank-plugin/jobfs_state.c \
	spank-plugin/jobfs_proc.c \
	spank-plugin/jobfs_secret.c \
	spank-plugin/jobfs_hostlist.c \
	spank-plugin/jobfs_stage.c \
	spank-plugin/jobfs_output.c
spank_plugin_spank_jobfs_la_CPPFLAGS = -DJOBFS_SBINDIR='"$(sbindir)"' -DJOBFS_BINDIR='"$(bindir)"'
# Not $(AM_CFLAGS): slurmd loads the plugin, so it is never built with the sanitizers.
# Messages and paths are cut at their buffers on purpose (snprintf), hence no format-truncation.
spank_plugin_spank_jobfs_la_CFLAGS = $(JOBFS_WARN) -Wno-format-truncation -std=gnu11 $(OPENSSL_CFLAGS)
spank_plugin_spank_jobfs_la_LIBADD = $(OPENSSL_LIBS)
spank_plugin_spank_jobfs_la_LDFLAGS = -module -avoid-version -shared \
	-export-symbols-regex '^(slurm_spank_|plugin_|spank_jobfs)'
endif
