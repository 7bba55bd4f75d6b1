/*
 * spank_ac.c - SPANK plugin connecting Slurm jobs to the ARM accelerator
 * resource manager.
 *
 * What it does:
 *  - registers `--acpn=N` (accelerators per compute node) for sbatch, salloc
 *    and srun, and forwards N to the controller as the job control variable
 *    ACPN (job_submit.lua turns it into an `ac:` license request; the
 *    controller's prolog/epilog see it as SPANK_ACPN);
 *  - in every task of every job (with or without --acpn) sets ARM_JOB_ID,
 *    ARM_NODE and ARM_AUTH=munge, plus ARM_ADDR, ARM_CA_CERT and
 *    ARM_MUNGE_SOCKET when plugstack.conf gives them, so the client library
 *    inside the job finds ARM and authenticates without user configuration.
 *
 * plugstack.conf:
 *   required /path/spank_ac.so [arm_addr=HOST:PORT[,HOST:PORT...]]
 *                              [arm_ca=/path/ca.pem]
 *                              [munge_socket=/path/munge.sock]
 *
 * Build: gcc -shared -fPIC -o spank_ac.so spank_ac.c
 *
 * No heap allocation anywhere: the parsed plugin arguments point into the argv
 * that Slurm owns and keeps for the plugin's lifetime, so nothing can leak.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/spank.h>

SPANK_PLUGIN(ac, 1);

/* Far above any real node; the cap keeps nodes*N well inside Lua's and
 * Slurm's integer ranges, so a typo cannot overflow a license count. */
#define ACPN_MAX 4096

/* -1 = option not given. Set by the option callback, which Slurm calls
 * before slurm_spank_init_post_opt in the same process. */
static int acpn = -1;

/* Values from plugstack.conf; NULL when not given. */
struct ac_args {
	const char *arm_addr;
	const char *arm_ca;
	const char *munge_socket;
};

/*
 * Parse a non-negative decimal integer no larger than max. Stricter than
 * atoi: rejects empty strings, signs, trailing junk and overflow, so
 * `--acpn=2x` or `--acpn=-1` fail instead of silently meaning 2 or 0.
 */
static int parse_uint(const char *s, long max, long *out)
{
	char *end = NULL;
	long v;

	if (s == NULL || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < 0 || v > max)
		return -1;
	*out = v;
	return 0;
}

static int acpn_cb(int val, const char *optarg, int remote)
{
	long v;

	(void) val;
	(void) remote;
	if (parse_uint(optarg, ACPN_MAX, &v) != 0) {
		slurm_error("ac: --acpn needs an integer from 0 to %d "
			    "(accelerators per node), got '%s'",
			    ACPN_MAX, optarg ? optarg : "");
		return -1;
	}
	acpn = (int) v;
	return 0;
}

static struct spank_option acpn_option = {
	"acpn", "N",
	"Request N remote accelerators per allocated node (ARM).",
	1, 0, acpn_cb
};

/* HOST:PORT with a non-empty host and a port 1..65535; the host part may
 * itself contain ':' (bracketed IPv6), so split at the last one. */
static int valid_one_addr(const char *s)
{
	const char *colon = strrchr(s, ':');
	long port;

	if (colon == NULL || colon == s)
		return 0;
	if (parse_uint(colon + 1, 65535, &port) != 0 || port == 0)
		return 0;
	return 1;
}

/*
 * HOST:PORT, or several separated by commas (the replicas of a replicated
 * manager): each one must be HOST:PORT.
 */
static int valid_addr(const char *s)
{
	char one[256];
	const char *start = s;

	for (;;) {
		const char *comma = strchr(start, ',');
		size_t len = comma ? (size_t)(comma - start) : strlen(start);

		if (len == 0 || len >= sizeof(one))
			return 0;
		memcpy(one, start, len);
		one[len] = '\0';
		if (!valid_one_addr(one))
			return 0;
		if (comma == NULL)
			return 1;
		start = comma + 1;
	}
}

/*
 * Parse the plugstack.conf arguments. Unknown keys, empty values and
 * duplicates are errors: a misspelt key would otherwise silently leave jobs
 * without ARM settings, which is much harder to diagnose than a failed start.
 */
static int parse_args(int ac, char **argv, struct ac_args *out)
{
	int i;

	memset(out, 0, sizeof(*out));
	for (i = 0; i < ac; i++) {
		const char *arg = argv[i];
		const char **slot = NULL;
		const char *val = NULL;

		if (arg == NULL)
			continue;
		if (strncmp(arg, "arm_addr=", 9) == 0) {
			slot = &out->arm_addr;
			val = arg + 9;
		} else if (strncmp(arg, "arm_ca=", 7) == 0) {
			slot = &out->arm_ca;
			val = arg + 7;
		} else if (strncmp(arg, "munge_socket=", 13) == 0) {
			slot = &out->munge_socket;
			val = arg + 13;
		}
		if (slot == NULL) {
			slurm_error("ac: unknown plugin argument '%s' (known: "
				    "arm_addr=HOST:PORT arm_ca=PATH "
				    "munge_socket=PATH)", arg);
			return -1;
		}
		if (*val == '\0') {
			slurm_error("ac: empty value in plugin argument '%s'",
				    arg);
			return -1;
		}
		if (*slot != NULL) {
			slurm_error("ac: plugin argument '%s' given twice",
				    arg);
			return -1;
		}
		*slot = val;
	}
	if (out->arm_addr && !valid_addr(out->arm_addr)) {
		slurm_error("ac: arm_addr must be HOST:PORT (or several, "
			    "separated by commas), got '%s'",
			    out->arm_addr);
		return -1;
	}
	/* Tasks may run in any working directory: relative paths would
	 * resolve differently in every job. */
	if ((out->arm_ca && out->arm_ca[0] != '/') ||
	    (out->munge_socket && out->munge_socket[0] != '/')) {
		slurm_error("ac: arm_ca and munge_socket must be absolute "
			    "paths");
		return -1;
	}
	return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **argv)
{
	struct ac_args args;
	spank_context_t ctx = spank_context();

	/* Validate in every context so that a bad plugstack.conf shows up
	 * at once (sbatch, srun, slurmd), not only when a task starts. */
	if (parse_args(ac, argv, &args) != 0)
		return -1;

	/* The option must be known where it is given (allocator: sbatch/
	 * salloc, local: srun) and where Slurm replays it (remote:
	 * slurmstepd); other contexts do not take options. */
	if (ctx == S_CTX_ALLOCATOR || ctx == S_CTX_LOCAL ||
	    ctx == S_CTX_REMOTE) {
		spank_err_t rc = spank_option_register(sp, &acpn_option);
		if (rc != ESPANK_SUCCESS) {
			slurm_error("ac: cannot register --acpn: %s",
				    spank_strerror(rc));
			return -1;
		}
	}
	return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **argv)
{
	spank_context_t ctx = spank_context();
	char buf[16];
	spank_err_t rc;

	(void) ac;
	(void) argv;
	if (acpn < 0 || (ctx != S_CTX_ALLOCATOR && ctx != S_CTX_LOCAL))
		return 0;

	/* The job control environment travels with the job request: the
	 * controller's job_submit.lua reads it from job_desc.spank_job_env
	 * and PrologSlurmctld/EpilogSlurmctld get it as SPANK_ACPN. For an
	 * srun inside an existing allocation this is a harmless no-op: the
	 * licenses were fixed when the job was submitted. */
	snprintf(buf, sizeof(buf), "%d", acpn);
	rc = spank_job_control_setenv(sp, "ACPN", buf, 1);
	if (rc != ESPANK_SUCCESS) {
		slurm_error("ac: cannot pass --acpn to the controller: %s",
			    spank_strerror(rc));
		return -1;
	}
	return 0;
}

/* spank_setenv with a uniform error message; overwrite because the
 * cluster's configuration, not a stale value inherited from the submitting
 * shell, must decide which ARM a task talks to. */
static int set_task_env(spank_t sp, const char *name, const char *val)
{
	spank_err_t rc = spank_setenv(sp, name, val, 1);

	if (rc != ESPANK_SUCCESS) {
		slurm_error("ac: cannot set %s: %s", name,
			    spank_strerror(rc));
		return -1;
	}
	return 0;
}

/*
 * Remote context, as root, once per task just before it execs: the last
 * point where the task's environment can be changed.
 */
int slurm_spank_task_init_privileged(spank_t sp, int ac, char **argv)
{
	struct ac_args args;
	uint32_t job_id = 0;
	char job_id_s[16];
	const char *node;
	spank_err_t rc;

	if (!spank_remote(sp))
		return 0;
	if (parse_args(ac, argv, &args) != 0)
		return -1;

	rc = spank_get_item(sp, S_JOB_ID, &job_id);
	if (rc != ESPANK_SUCCESS) {
		slurm_error("ac: cannot get the job id: %s",
			    spank_strerror(rc));
		return -1;
	}
	snprintf(job_id_s, sizeof(job_id_s), "%u", job_id);

	/* This node's Slurm name (not its hostname: several slurmd may share
	 * a host). Read slurmstepd's own environment, where Slurm sets it for
	 * this node, not the job's: at this point the job env holds only what
	 * the step was launched with, which for an srun inside a batch job is
	 * the batch host's SLURMD_NODENAME (Slurm sets the task's own value
	 * after this hook), and for a batch step nothing at all. */
	node = getenv("SLURMD_NODENAME");
	if (node == NULL || *node == '\0') {
		slurm_error("ac: SLURMD_NODENAME is not set in slurmstepd");
		return -1;
	}

	if (set_task_env(sp, "ARM_JOB_ID", job_id_s) ||
	    set_task_env(sp, "ARM_NODE", node) ||
	    set_task_env(sp, "ARM_AUTH", "munge"))
		return -1;
	if (args.arm_addr && set_task_env(sp, "ARM_ADDR", args.arm_addr))
		return -1;
	if (args.arm_ca && set_task_env(sp, "ARM_CA_CERT", args.arm_ca))
		return -1;
	if (args.munge_socket &&
	    set_task_env(sp, "ARM_MUNGE_SOCKET", args.munge_socket))
		return -1;
	return 0;
}
