//! `Display` for [`Info`]: the `fi_info` command's short listing, or with
//! `{:#}` every attribute in the `fi_tostr(FI_TYPE_INFO)` layout.

use std::fmt;

use super::attr::{Info, ResourceMgmt};

/// Bits printed as libfabric's YAML-ish list: `[ FI_A, FI_B ]`.
struct List<T>(T);

impl<T: fmt::Display> fmt::Display for List<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0.to_string();
        if text == "0" || text == "FI_ORDER_NONE" {
            return f.write_str("[ ]");
        }
        write!(f, "[ {} ]", text.replace(" | ", ", "))
    }
}

impl fmt::Display for ResourceMgmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ResourceMgmt::Enabled => "FI_RM_ENABLED",
        })
    }
}

impl fmt::Display for Info {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            self.fmt_verbose(f)
        } else {
            self.fmt_short(f)
        }
    }
}

impl Info {
    fn fmt_short(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fa = &self.fabric_attr;
        writeln!(f, "provider: {}", fa.prov_name)?;
        writeln!(f, "    fabric: {}", fa.name)?;
        writeln!(f, "    domain: {}", self.domain_attr.name)?;
        writeln!(f, "    version: {}", fa.prov_version)?;
        writeln!(f, "    type: {}", self.ep_type)?;
        writeln!(f, "    protocol: {}", self.ep_attr.protocol)?;
        writeln!(f, "    engine: {}", self.engine)?;
        writeln!(f, "    caps: {}", self.caps)?;
        writeln!(f, "    mode: {}", self.mode)?;
        writeln!(f, "    progress: {}", self.progress)?;
        if !self.spin.is_zero() {
            writeln!(f, "    spin: {} us", self.spin.as_micros())?;
        }
        if let Some(every) = self.idle_assist {
            writeln!(f, "    idle_assist: {} us", every.as_micros())?;
        }
        writeln!(f, "    mem_tag_format: {:#018x}", self.mem_tag_format)?;
        writeln!(f, "    inject_size: {}", self.inject_size)?;
        writeln!(f, "    max_msg_size: {}", self.max_msg_size)?;
        if let Some(dest) = self.dest_addr {
            writeln!(f, "    dest_addr: {dest}")?;
        }
        if let Some(src) = &self.source {
            writeln!(
                f,
                "    source: unit {} port {} service {}",
                opt(src.unit, "any"),
                opt(src.port, "any"),
                src.service
            )?;
        }
        self.fmt_rails(f, "    ")
    }

    /// The rails and policies of a multi-rail info.
    fn fmt_rails(&self, f: &mut fmt::Formatter<'_>, indent: &str) -> fmt::Result {
        let Some(m) = &self.mrail else {
            return Ok(());
        };
        writeln!(f, "{indent}rails: {}", m.rails.len())?;
        for (i, r) in m.rails.iter().enumerate() {
            writeln!(f, "{indent}    rail {i}: {r}")?;
        }
        writeln!(f, "{indent}policy: {}", m.policy_table())?;
        writeln!(
            f,
            "{indent}fixed_rail: {} (local rank {})",
            m.fixed_rail, m.local_rank
        )
    }

    fn fmt_verbose(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (tx, rx, ep, dom, fa) = (
            &self.tx_attr,
            &self.rx_attr,
            &self.ep_attr,
            &self.domain_attr,
            &self.fabric_attr,
        );
        writeln!(f, "---")?;
        writeln!(f, "fi_info:")?;
        writeln!(f, "    caps: {}", List(self.caps))?;
        writeln!(f, "    mode: {}", List(self.mode))?;
        let addr_format = if self.mrail.is_some() {
            "FI_ADDR_MRAIL"
        } else {
            "FI_ADDR_PSMX"
        };
        writeln!(f, "    addr_format: {addr_format}")?;
        writeln!(
            f,
            "    src_addrlen: {}",
            if self.src_addr.is_some() { 8 } else { 0 }
        )?;
        writeln!(
            f,
            "    dest_addrlen: {}",
            if self.dest_addr.is_some() { 8 } else { 0 }
        )?;
        if let Some(src) = self.src_addr {
            writeln!(f, "    src_addr: {src}")?;
        }
        if let Some(dest) = self.dest_addr {
            writeln!(f, "    dest_addr: {dest}")?;
        }
        if let Some(src) = &self.source {
            writeln!(f, "    source:")?;
            writeln!(f, "        node: {:?}", src.node)?;
            writeln!(f, "        unit: {}", opt(src.unit, "any (-1)"))?;
            writeln!(f, "        port: {}", opt(src.port, "any (0)"))?;
            writeln!(f, "        service: {}", src.service)?;
        }
        writeln!(f, "    engine: {}", self.engine)?;
        self.fmt_rails(f, "    ")?;
        writeln!(f, "    fi_tx_attr:")?;
        writeln!(f, "        caps: {}", List(tx.caps))?;
        writeln!(f, "        mode: {}", List(tx.mode))?;
        writeln!(f, "        op_flags: [ ]")?;
        writeln!(f, "        msg_order: {}", List(tx.msg_order))?;
        writeln!(f, "        comp_order: {}", List(tx.comp_order))?;
        writeln!(f, "        inject_size: {}", self.inject_size)?;
        writeln!(f, "        size: {}", tx.size)?;
        writeln!(f, "        iov_limit: {}", tx.iov_limit)?;
        writeln!(f, "        rma_iov_limit: {}", tx.rma_iov_limit)?;
        writeln!(f, "    fi_rx_attr:")?;
        writeln!(f, "        caps: {}", List(rx.caps))?;
        writeln!(f, "        mode: {}", List(rx.mode))?;
        writeln!(f, "        op_flags: [ ]")?;
        writeln!(f, "        msg_order: {}", List(rx.msg_order))?;
        writeln!(f, "        comp_order: {}", List(rx.comp_order))?;
        writeln!(f, "        total_buffered_recv: {}", rx.total_buffered_recv)?;
        writeln!(f, "        size: {}", rx.size)?;
        writeln!(f, "        iov_limit: {}", rx.iov_limit)?;
        writeln!(f, "    fi_ep_attr:")?;
        writeln!(f, "        type: {}", self.ep_type)?;
        writeln!(f, "        protocol: {}", ep.protocol)?;
        writeln!(f, "        max_msg_size: {}", self.max_msg_size)?;
        writeln!(f, "        msg_prefix_size: {}", ep.msg_prefix_size)?;
        writeln!(f, "        max_order_raw_size: {}", ep.max_order_raw_size)?;
        writeln!(f, "        max_order_war_size: {}", ep.max_order_war_size)?;
        writeln!(f, "        max_order_waw_size: {}", ep.max_order_waw_size)?;
        writeln!(f, "        mem_tag_format: {:#018x}", self.mem_tag_format)?;
        writeln!(f, "        tx_ctx_cnt: {}", ep.tx_ctx_cnt)?;
        writeln!(f, "        rx_ctx_cnt: {}", ep.rx_ctx_cnt)?;
        writeln!(f, "    fi_domain_attr:")?;
        writeln!(f, "        name: {}", dom.name)?;
        writeln!(f, "        threading: {}", dom.threading)?;
        writeln!(f, "        control_progress: {}", dom.control_progress)?;
        writeln!(f, "        data_progress: {}", self.progress)?;
        writeln!(f, "        resource_mgmt: {}", dom.resource_mgmt)?;
        writeln!(f, "        av_type: {}", self.av_type)?;
        writeln!(f, "        mr_key_size: {}", dom.mr_key_size)?;
        writeln!(f, "        cq_data_size: {}", dom.cq_data_size)?;
        writeln!(f, "        cq_cnt: {}", dom.cq_cnt)?;
        writeln!(f, "        ep_cnt: {}", dom.ep_cnt)?;
        writeln!(f, "        tx_ctx_cnt: {}", dom.tx_ctx_cnt)?;
        writeln!(f, "        rx_ctx_cnt: {}", dom.rx_ctx_cnt)?;
        writeln!(f, "        max_ep_tx_ctx: {}", dom.max_ep_tx_ctx)?;
        writeln!(f, "        max_ep_rx_ctx: {}", dom.max_ep_rx_ctx)?;
        writeln!(f, "        max_ep_stx_ctx: {}", dom.max_ep_stx_ctx)?;
        writeln!(f, "        max_ep_srx_ctx: {}", dom.max_ep_srx_ctx)?;
        writeln!(f, "        cntr_cnt: {}", dom.cntr_cnt)?;
        writeln!(f, "        mr_iov_limit: {}", dom.mr_iov_limit)?;
        writeln!(f, "        mr_cnt: {}", dom.mr_cnt)?;
        writeln!(f, "        caps: {}", List(dom.caps))?;
        writeln!(f, "    fi_fabric_attr:")?;
        writeln!(f, "        name: {}", fa.name)?;
        writeln!(f, "        prov_name: {}", fa.prov_name)?;
        writeln!(f, "        prov_version: {}", fa.prov_version)?;
        writeln!(f, "    psm:")?;
        writeln!(f, "        am_msg: {}", self.config.am_msg())?;
        writeln!(f, "        tagged_rma: {}", self.config.tagged_rma())?;
        writeln!(f, "        name_server: {}", self.config.name_server())?;
        writeln!(f, "        uuid: {}", self.config.uuid())?;
        writeln!(f, "---")
    }
}

fn opt(v: Option<u32>, none: &str) -> String {
    v.map_or_else(|| none.to_owned(), |v| v.to_string())
}
