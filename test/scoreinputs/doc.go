// Package scoreinputs proves the chart's score-inputs admission policies
// on a real API server: the annotation each admitted pod gets is what the
// plugin's parser reads, and no pod brings its own.
package scoreinputs
