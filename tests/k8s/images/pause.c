/* The pod sandbox's process: holds the pod's namespaces until it is told to stop, reaps orphans (it is PID 1
 * of the pod when the pod shares its PID namespace). Built statically into the local pause image. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig)
{
	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

int main(void)
{
	struct sigaction term = { .sa_handler = stop }, chld = { .sa_handler = reap, .sa_flags = SA_NOCLDSTOP };
	if (sigaction(SIGINT, &term, NULL) < 0 || sigaction(SIGTERM, &term, NULL) < 0 ||
	    sigaction(SIGCHLD, &chld, NULL) < 0)
		return 1;
	for (;;)
		pause();
}
