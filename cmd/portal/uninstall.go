package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/vilaca/portal/internal/admission"
)

// uninstallOptions say what `portal uninstall` removes.
type uninstallOptions struct {
	Namespace   string
	ConfigNames []string
	Deployments []string
	// Secrets and Leases are what Portal itself wrote in Namespace (its
	// certificate Secrets, its leader-election Leases): no package manager
	// knows them, so they go once no Portal pod is left to write them again.
	Secrets []string
	Leases  []string
	Timeout time.Duration
	// Poll is how often the pods are listed while waiting; default 1s.
	Poll time.Duration
}

func newUninstallCommand() *cobra.Command {
	o := uninstallOptions{ConfigNames: []string{admission.ConfigName}, Timeout: 2 * time.Minute}
	kubeconfig, logLevel := "", "info"
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove Portal's webhook configuration and stop Portal, before its resources are deleted",
		Long: `Remove what Portal writes that would outlive it, in the order that keeps the
cluster working: delete the ValidatingWebhookConfiguration(s), scale Portal's
Deployments to zero so no leader writes them again, wait until no Portal pod
is left, delete the configuration(s) once more, then the Secrets and Leases
Portal wrote (--secrets, --leases). The Helm chart runs it as a pre-delete
hook; run it by hand before deleting Portal any other way.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(logLevel)
			if err != nil {
				return usageError(err)
			}
			if o.Namespace == "" {
				return usageError(errors.New("--namespace must name Portal's namespace"))
			}
			if o.Timeout <= 0 {
				return usageError(fmt.Errorf("--timeout %s: use a positive duration", o.Timeout))
			}
			restCfg, err := restConfig(kubeconfig)
			if err != nil {
				return usageError(err)
			}
			cs, err := kubernetes.NewForConfig(restCfg)
			if err != nil {
				return err
			}
			return uninstall(cmd.Context(), cs, o, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Namespace, "namespace", o.Namespace, "Portal's namespace")
	f.StringSliceVar(&o.ConfigNames, "webhook-config-name", o.ConfigNames, "ValidatingWebhookConfiguration(s) to delete")
	f.StringSliceVar(&o.Deployments, "deployments", o.Deployments, "Portal's Deployments in --namespace, to scale to zero")
	f.StringSliceVar(&o.Secrets, "secrets", o.Secrets, "Secrets Portal wrote in --namespace (its certificates), deleted once its pods are gone")
	f.StringSliceVar(&o.Leases, "leases", o.Leases, "leader-election Leases in --namespace, deleted once Portal's pods are gone")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "how long to wait for Portal's pods to stop")
	f.StringVar(&kubeconfig, "kubeconfig", kubeconfig, "kubeconfig to use outside a cluster (default: $KUBECONFIG, then ~/.kube/config)")
	f.StringVar(&logLevel, "log-level", logLevel, "debug, info, warn or error")
	return cmd
}

// uninstall deletes the webhook configurations, stops the Deployments, waits
// for their pods to go and deletes the configurations again: a leader still
// running after the first delete may have written them back.
func uninstall(ctx context.Context, cs kubernetes.Interface, o uninstallOptions, log *slog.Logger) error {
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if err := deleteWebhookConfigs(ctx, cs, o.ConfigNames, log); err != nil {
		return err
	}
	var selectors []string
	for _, name := range o.Deployments {
		sel, err := scaleToZero(ctx, cs, o.Namespace, name, log)
		if err != nil {
			return err
		}
		if sel != "" {
			selectors = append(selectors, sel)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, o.Poll, o.Timeout, true, func(ctx context.Context) (bool, error) {
		for _, sel := range selectors {
			pods, err := cs.CoreV1().Pods(o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil {
				return false, fmt.Errorf("list Portal's pods: %w", err)
			}
			if n := len(pods.Items); n > 0 {
				log.Info("waiting for Portal's pods to stop", "selector", sel, "pods", n)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		// Delete again anyway: the pods left are stopping, and a
		// configuration outliving them would block admission.
		log.Warn("Portal's pods did not stop in time", "timeout", o.Timeout.String(), "error", err)
	}
	if derr := deleteWebhookConfigs(ctx, cs, o.ConfigNames, log); derr != nil {
		return derr
	}
	if err != nil {
		return fmt.Errorf("webhook configurations deleted, but Portal's pods did not stop within --timeout %s: delete them, then delete the configurations %v again: %w", o.Timeout, o.ConfigNames, err)
	}
	return deleteLeftovers(ctx, cs, o, log)
}

// deleteLeftovers deletes the Secrets and Leases Portal wrote; only once
// its pods are gone, as a running leader would write them again.
func deleteLeftovers(ctx context.Context, cs kubernetes.Interface, o uninstallOptions, log *slog.Logger) error {
	for _, name := range o.Secrets {
		err := cs.CoreV1().Secrets(o.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete Secret %s/%s: %w", o.Namespace, name, err)
		}
		if err == nil {
			log.Info("deleted Portal's Secret", "name", name)
		}
	}
	for _, name := range o.Leases {
		err := cs.CoordinationV1().Leases(o.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete Lease %s/%s: %w", o.Namespace, name, err)
		}
		if err == nil {
			log.Info("deleted Portal's leader-election Lease", "name", name)
		}
	}
	return nil
}

func deleteWebhookConfigs(ctx context.Context, cs kubernetes.Interface, names []string, log *slog.Logger) error {
	for _, name := range names {
		err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{})
		switch {
		case err == nil:
			log.Info("deleted the webhook configuration", "name", name)
		case apierrors.IsNotFound(err):
		default:
			return fmt.Errorf("delete ValidatingWebhookConfiguration %s: %w", name, err)
		}
	}
	return nil
}

// scaleToZero sets the Deployment's replicas to 0 and returns its pod
// selector; "" when the Deployment does not exist.
func scaleToZero(ctx context.Context, cs kubernetes.Interface, namespace, name string, log *slog.Logger) (string, error) {
	d, err := cs.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("get Deployment %s/%s: %w", namespace, name, err)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return "", fmt.Errorf("selector of Deployment %s/%s: %w", namespace, name, err)
	}
	_, err = cs.AppsV1().Deployments(namespace).Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("scale Deployment %s/%s to zero: %w", namespace, name, err)
	}
	log.Info("scaled Portal to zero", "deployment", name)
	return sel.String(), nil
}
